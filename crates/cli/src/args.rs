//! Command-line arguments.

use clap::{Args, Parser, Subcommand};

/// The version and the commit this binary was built from (build.rs), as `--version` prints it.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("KVAD_COMMIT"), ")");

/// kvad: a local LLM engine.
#[derive(Parser, Debug)]
#[command(name = "kvad", version = VERSION, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Where commands go: a server, or this process.
#[derive(Args, Debug, Clone, Default)]
pub struct ClientArgs {
    /// Send the command to this server (an error if it does not answer).
    #[arg(long, global = true, value_name = "URL")]
    pub remote: Option<String>,
    /// Run in this process even when a server answers.
    #[arg(long, global = true)]
    pub local: bool,
    /// Print what the server sent, as JSON (streams: one event a line).
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Generate a reply to one prompt; tokens stream to stdout, a summary goes to stderr.
    Run(RunArgs),
    /// Talk with a model; the conversation is kept until you leave (/exit) or reset it (/reset).
    Chat(ModelArgs),
    /// List the architectures and the backends that run each.
    Arch,
    /// What this machine can run: CPU, GPU (which, driver, memory), the backends and the default one.
    Doctor,
    /// Measure prefill, decode and time to first token: interleaved rounds, medians and ranges.
    Bench(BenchArgs),
    /// List the quantised weights kvad has cached; `kvad cache clear` deletes them.
    Cache {
        /// `clear` deletes every cached file.
        action: Option<CacheAction>,
    },
    /// Perplexity of a text file on one or more backends (the accuracy measure of quantisation).
    Ppl(PplArgs),
    /// Download a model (owner/name[@revision], an alias, or ollama:name[:tag]) into the cache: the server's when one
    /// answers (the first line says which), else this machine's.
    Pull(crate::hub_cmds::PullArgs),
    /// What models are on this machine, and how big.
    Ls(crate::hub_cmds::LsArgs),
    /// Delete a model from the cache.
    Rm(crate::hub_cmds::RmArgs),
    /// Make a model the default one.
    Use(crate::hub_cmds::UseArgs),
    /// A model's config and files, without downloading its weights.
    Info(crate::hub_cmds::InfoArgs),
    /// Search the Hugging Face Hub; each result says whether this build can run it.
    Search(crate::hub_cmds::SearchArgs),
    /// The model index: supported models, draft candidates, related repos; `update` fetches it again.
    Models(crate::hub_models::ModelsArgs),
    /// Print the shell completion script for every verb and flag (e.g. `kvad completions bash >
    /// ~/.local/share/bash-completion/completions/kvad`).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print a manual page (roff): kvad's, or a verb's (`kvad man run | man -l -`).
    Man {
        /// A verb (none: kvad's own page, listing every verb).
        verb: Option<String>,
    },
    /// Start the server (hands over to kvad-serve; its flags follow, e.g. --bind, --model).
    #[command(disable_help_flag = true)]
    Serve {
        /// kvad-serve's arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// With no path, every route of the server's API; with a path, call it.
    Api {
        /// A path such as /v1/models.
        path: Option<String>,
        /// HTTP method (default GET, or POST when --data is given).
        #[arg(short = 'X', long)]
        method: Option<String>,
        /// A JSON body.
        #[arg(short, long)]
        data: Option<String>,
    },
    /// The kvad service.
    Service {
        #[command(subcommand)]
        command: ServiceCommand,
    },
    /// What waits on the server's queue (for how long, and whose) and what runs.
    Queue,
    /// The models in the server's memory: what each is charged, its kept conversations, the memory left.
    Ps,
    /// Embeddings from an embedding model on the server (`POST /v1/embeddings`): one JSON line per text, its index
    /// and vector; with --json the server's whole answer.
    Embed {
        /// The model's id, as /v1/models lists it.
        model: String,
        /// The texts, one vector each.
        #[arg(required = true)]
        texts: Vec<String>,
        /// Shorter vectors (truncated and normalised again), where the model declares Matryoshka training.
        #[arg(long)]
        dimensions: Option<usize>,
    },
    /// Load a model on the server (a job on its queue); refused, naming what holds the memory, when it does not fit,
    /// and naming the backend it is on when it is in memory on another (unload it first).
    Load {
        /// The model's id, as /v1/models lists it.
        model: String,
        /// The backend to load it on (cpu-f32, cpu-q8, cpu-q4, gpu-bf16, gpu-q8, gpu-q4), the model's default on
        /// that server from then on; the server checks the name. Default: the model's default there (the backend
        /// its last load named, else [server] backend, else gpu-q8 where the GPU runs it, else cpu-q8).
        #[arg(long)]
        backend: Option<String>,
    },
    /// Unload a model from the server's memory; with no name, every model.
    Unload {
        /// The model's id (none: all of them).
        model: Option<String>,
    },
    /// The server's figures.
    Metrics {
        #[command(subcommand)]
        command: MetricsCommand,
    },
    /// Sign in to a server and keep an API key for it (credentials.json, readable by you only); sign out; who am I.
    Auth {
        #[command(subcommand)]
        command: AuthCommand,
    },
    /// The server's accounts (administrators): list, add, set, rm.
    Users {
        #[command(subcommand)]
        command: Option<UsersCommand>,
    },
    /// Signed-in browser sessions: yours (an administrator: everyone's); list, rm.
    Sessions {
        #[command(subcommand)]
        command: Option<SessionsCommand>,
    },
    /// API keys: yours (an administrator: everyone's); list, create, revoke.
    Keys {
        #[command(subcommand)]
        command: Option<KeysCommand>,
    },
    /// Training sets on the server: list, add (checked line by line), show, rm.
    Datasets {
        #[command(subcommand)]
        command: Option<DatasetsCommand>,
    },
    /// Long-running work on the server (training runs): list, show, follow, cancel.
    Jobs {
        #[command(subcommand)]
        command: Option<JobsCommand>,
    },
    /// Train on the server: fine-tune MODEL (whole, or --lora-rank) or start from --config, on --data FILE or
    /// --dataset ID; the result is `trained:OUTPUT`. Follows the job's progress until it ends.
    Train(Box<TrainCmd>),
    /// Evals on the server: run a prompt suite against models, list a run's answers (and where two runs differ).
    Evals {
        #[command(subcommand)]
        command: EvalsCommand,
    },
}

/// `kvad evals`.
#[derive(Subcommand, Debug)]
pub enum EvalsCommand {
    /// Ask every item of a suite (JSONL of {"prompt", "expected", "scorer"?}) of each model, in turn; follow it.
    Run {
        /// A suite file to upload.
        #[arg(long)]
        data: Option<std::path::PathBuf>,
        /// An uploaded suite's id.
        #[arg(long)]
        dataset: Option<String>,
        /// A model (1 to 4 of them), with a chat template.
        #[arg(long = "model", required = true)]
        models: Vec<String>,
        /// The scorer for items that name none: exact, contains, regex, choice.
        #[arg(long)]
        scorer: Option<String>,
        /// Tokens an answer may take.
        #[arg(long)]
        max_tokens: Option<usize>,
        /// A system message before every prompt.
        #[arg(long)]
        system: Option<String>,
    },
    /// The perplexity of a model over a dataset's documents ({"text"} lines or plain text), through the server's
    /// scheduler; follow it.
    Ppl {
        /// A file to upload.
        #[arg(long)]
        data: Option<std::path::PathBuf>,
        /// An uploaded dataset's id.
        #[arg(long)]
        dataset: Option<String>,
        /// The model.
        #[arg(long)]
        model: String,
        /// Which documents: all, train or validation.
        #[arg(long)]
        split: Option<String>,
        /// Tokens a window (default: the model's context).
        #[arg(long)]
        window: Option<usize>,
    },
    /// An eval job's answers; with --against another job, only the items whose score differs.
    Items {
        /// The job's id.
        job: String,
        /// Another eval job to compare with.
        #[arg(long)]
        against: Option<String>,
    },
}

/// `kvad train`.
#[derive(clap::Args, Debug)]
pub struct TrainCmd {
    /// The model to fine-tune (safetensors), as `kvad ls` names it.
    pub model: Option<String>,
    /// An HF config.json to train a new model from (with a byte-level tokenizer unless --tokenizer names a model).
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
    /// With --config: "bytes" or a model whose tokenizer the new model takes.
    #[arg(long)]
    pub tokenizer: Option<String>,
    /// With --config: a chat template file the new model carries.
    #[arg(long)]
    pub chat_template: Option<std::path::PathBuf>,
    /// With a byte-level tokenizer: its end token.
    #[arg(long)]
    pub eos: Option<String>,
    /// A dataset file to upload (JSONL of {"text"} or {"messages"}, or plain text).
    #[arg(long)]
    pub data: Option<std::path::PathBuf>,
    /// An uploaded dataset's id.
    #[arg(long)]
    pub dataset: Option<String>,
    /// The trained model's name (it becomes trained:OUTPUT).
    #[arg(long)]
    pub output: String,
    /// Optimiser steps.
    #[arg(long)]
    pub steps: Option<usize>,
    /// Peak learning rate.
    #[arg(long)]
    pub lr: Option<f32>,
    /// Warmup steps.
    #[arg(long)]
    pub warmup: Option<usize>,
    /// Rows a micro-batch.
    #[arg(long)]
    pub batch: Option<usize>,
    /// Micro-batches a step (gradient accumulation).
    #[arg(long)]
    pub accum: Option<usize>,
    /// Tokens a row.
    #[arg(long)]
    pub seq_len: Option<usize>,
    /// A checkpoint every N steps.
    #[arg(long)]
    pub save_every: Option<usize>,
    /// The validation loss every N steps.
    #[arg(long)]
    pub eval_every: Option<usize>,
    /// LoRA of this rank instead of full fine-tuning.
    #[arg(long)]
    pub lora_rank: Option<usize>,
    /// LoRA's alpha (default twice the rank).
    #[arg(long)]
    pub lora_alpha: Option<f32>,
    /// LoRA's target modules, comma-separated (default: every projection).
    #[arg(long, value_delimiter = ',')]
    pub lora_targets: Option<Vec<String>>,
}

/// `kvad datasets`.
#[derive(Subcommand, Debug)]
pub enum DatasetsCommand {
    /// Your datasets (the default).
    List,
    /// Upload a file (JSONL, JSON, Parquet or plain text), or take a Hub dataset's split with --hub; a bad one is
    /// refused naming every bad record.
    Add {
        /// The file.
        #[arg(required_unless_present = "hub", conflicts_with = "hub")]
        file: Option<std::path::PathBuf>,
        /// A dataset repo on the Hub, `owner/name[@revision]`, fetched by the server into its HF cache.
        #[arg(long)]
        hub: Option<String>,
        /// With --hub: the split (default train).
        #[arg(long, requires = "hub")]
        split: Option<String>,
        /// Its name on the server (default: the file's).
        #[arg(long)]
        name: Option<String>,
        /// The fraction of records held out for validation (default 0.1).
        #[arg(long)]
        validation: Option<f64>,
    },
    /// A dataset, its first records, and with --model its token counts.
    Show {
        /// Its id.
        id: String,
        /// Records to show.
        #[arg(long)]
        rows: Option<usize>,
        /// Count tokens as this model reads them.
        #[arg(long)]
        model: Option<String>,
    },
    /// Delete a dataset.
    Rm {
        /// Its id.
        id: String,
    },
}

/// `kvad jobs`.
#[derive(Subcommand, Debug)]
pub enum JobsCommand {
    /// Your jobs (the default).
    List,
    /// One job, whole.
    Show {
        /// Its id.
        id: String,
    },
    /// A job's progress until it ends.
    Follow {
        /// Its id.
        id: String,
    },
    /// Stop a job after the step it is on (its last checkpoint stays).
    Cancel {
        /// Its id.
        id: String,
    },
    /// Continue a cancelled or failed training run from its latest checkpoint (a new job); follow it.
    Resume {
        /// The stopped job's id.
        id: String,
    },
}

/// `kvad auth`.
#[derive(Subcommand, Debug)]
pub enum AuthCommand {
    /// Sign in (username and password; the password is not echoed), make an API key named after this host, keep it.
    Login {
        /// The server (else --remote, KVAD_URL, [client] url, the local service).
        #[arg(long)]
        url: Option<String>,
        /// The username (else asked).
        #[arg(long)]
        username: Option<String>,
        /// Read the password from stdin's first line (scripts).
        #[arg(long)]
        password_stdin: bool,
        /// Keep an API key read from stdin instead of signing in (servers that sign in through OIDC).
        #[arg(long, conflicts_with_all = ["username", "password_stdin"])]
        api_key_stdin: bool,
    },
    /// Revoke the kept API key on the server and forget it.
    Logout {
        /// The server.
        #[arg(long)]
        url: Option<String>,
    },
    /// Who the server says you are.
    Status {
        /// The server.
        #[arg(long)]
        url: Option<String>,
    },
}

impl AuthCommand {
    /// The `--url` given, if any.
    pub fn url(&self) -> Option<&str> {
        match self {
            AuthCommand::Login { url, .. } | AuthCommand::Logout { url } | AuthCommand::Status { url } => {
                url.as_deref()
            }
        }
    }
}

/// `kvad users`.
#[derive(Subcommand, Debug)]
pub enum UsersCommand {
    /// Every account (the default).
    List,
    /// Add an account; its password is asked (not echoed) or read from stdin.
    Add {
        /// The account's name.
        name: String,
        /// admin or user.
        #[arg(long, default_value = "user")]
        role: String,
        /// Read the password from stdin's first line.
        #[arg(long)]
        password_stdin: bool,
    },
    /// Change an account's role or password (a user: only its own password).
    Set {
        /// The account's name.
        name: String,
        /// admin or user.
        #[arg(long)]
        role: Option<String>,
        /// Ask for a new password.
        #[arg(long)]
        password: bool,
        /// Read the new password from stdin's first line.
        #[arg(long)]
        password_stdin: bool,
    },
    /// Delete an account with its sessions and keys.
    Rm {
        /// The account's name.
        name: String,
    },
}

/// `kvad sessions`.
#[derive(Subcommand, Debug)]
pub enum SessionsCommand {
    /// The sessions (the default).
    List,
    /// Sign a session out.
    Rm {
        /// The session's id, as `kvad sessions list` shows it.
        id: String,
    },
}

/// `kvad keys`.
#[derive(Subcommand, Debug)]
pub enum KeysCommand {
    /// The keys (the default); the keys themselves are never shown again.
    List,
    /// Make a key; it is printed once.
    Create {
        /// A name to recognise it by.
        name: String,
    },
    /// Revoke a key.
    Revoke {
        /// The key's id, as `kvad keys list` shows it.
        id: String,
    },
}

/// `kvad metrics`.
#[derive(Subcommand, Debug)]
pub enum MetricsCommand {
    /// The requests table added up by account: requests, tokens in, cached and out, waiting, first token.
    Usage {
        /// Over the last this many days.
        #[arg(long, default_value_t = 7)]
        days: u32,
    },
}

/// `kvad service`.
#[derive(Subcommand, Debug)]
pub enum ServiceCommand {
    /// Whether the service manager runs kvad and whether /api/health answers, and when they disagree.
    Status,
}

/// What `kvad cache` does.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheAction {
    /// Delete every cached file.
    Clear,
}

/// `kvad ppl`.
#[derive(Args, Debug, Clone)]
pub struct PplArgs {
    /// A text file.
    pub file: String,
    /// The model (path or alias).
    #[arg(long, default_value_t = kvad_hub::default_model())]
    pub model: String,
    /// Backends, comma-separated.
    #[arg(long, default_value = "cpu-f32,cpu-q8,cpu-q4")]
    pub backend: String,
    /// Tokens read per forward pass.
    #[arg(long, default_value_t = 128)]
    pub chunk: usize,
}

/// `kvad bench`.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Models (paths or aliases); every model runs on every backend given.
    #[arg(default_value = kvad_hub::DEFAULT_ALIAS)]
    pub models: Vec<String>,
    /// Backends, comma-separated (e.g. cpu-f32,cpu-q8,cpu-q4).
    #[arg(long, default_value = "cpu-q8")]
    pub backend: String,
    /// Timed rounds; each visits every variant once.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Untimed rounds first.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Prompt length in tokens.
    #[arg(long, default_value_t = 512)]
    pub prompt_tokens: usize,
    /// Tokens generated per sample.
    #[arg(long, default_value_t = 128)]
    pub gen_tokens: usize,
    /// Sequences generated together in one pass per step (their rates are totals).
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Also write every sample as JSON to this file (`--json` prints them to stdout instead of the table).
    #[arg(long)]
    pub out: Option<String>,
    /// Worker threads (default: physical cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Load generator: N concurrent streams against a server (--remote, KVAD_URL or the local service) instead of
    /// timing generations in this process; aggregate tok/s, TTFT and inter-token latency percentiles.
    #[arg(long, value_name = "N")]
    pub concurrency: Option<usize>,
    /// With --concurrency: also send one prompt of this many tokens (roughly: repeated words) after the streams are
    /// under way, and report the longest silence of the streams while it is read.
    #[arg(long, value_name = "TOKENS", requires = "concurrency")]
    pub join_prompt: Option<usize>,
    /// Serving benchmark against a server (as `vllm bench serve`): requests arrive as a Poisson process at this
    /// many a second (`inf`: all at once); throughput, TTFT, TPOT, inter-token and end-to-end percentiles, goodput.
    #[arg(long, value_name = "PER_S", conflicts_with = "concurrency")]
    pub request_rate: Option<f64>,
    /// With --request-rate: requests sent in all.
    #[arg(long, default_value_t = 100, requires = "request_rate")]
    pub requests: usize,
    /// With --request-rate: at most this many requests in flight (the rest wait their turn in the client).
    #[arg(long, value_name = "N", requires = "request_rate")]
    pub max_concurrency: Option<usize>,
    /// With --request-rate: prompt and output lengths drawn uniformly within this fraction of --prompt-tokens and
    /// --gen-tokens (0: every request the same; 0.5: from half to one and a half times).
    #[arg(long, default_value_t = 0.0, requires = "request_rate")]
    pub length_spread: f64,
    /// With --request-rate: the SLO's bound on time to first token, in seconds (goodput counts requests meeting it).
    #[arg(long, value_name = "SECONDS", requires = "request_rate")]
    pub slo_ttft: Option<f64>,
    /// With --request-rate: the SLO's bound on time per output token after the first, in seconds.
    #[arg(long, value_name = "SECONDS", requires = "request_rate")]
    pub slo_tpot: Option<f64>,
    /// With --request-rate: the seed of arrivals and lengths (the same seed, the same requests).
    #[arg(long, requires = "request_rate")]
    pub seed: Option<u64>,
}

/// What model, on what backend, sampled how.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// A directory in HF layout, a .gguf file, an alias, owner/name[@revision], or ollama:name[:tag].
    #[arg(default_value_t = kvad_hub::default_model())]
    pub model: String,
    /// A system message (chat models).
    #[arg(long)]
    pub system: Option<String>,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 512)]
    pub max_tokens: usize,
    /// 0 is greedy.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub temperature: f32,
    /// Nucleus sampling threshold.
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// Keep only the k most likely tokens (0: all).
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// Drop tokens below this fraction of the most likely one.
    #[arg(long, default_value_t = 0.0)]
    pub min_p: f32,
    /// HF-style repetition penalty (1: none).
    #[arg(long, default_value_t = 1.0)]
    pub repetition_penalty: f32,
    /// OpenAI-style presence penalty.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub presence_penalty: f32,
    /// OpenAI-style frequency penalty.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub frequency_penalty: f32,
    /// Seed for sampling.
    #[arg(long)]
    pub seed: Option<u64>,
    /// cpu-f32, cpu-q8, cpu-q4, gpu-bf16, gpu-q8 or gpu-q4 (default: gpu-q8 where a GPU runs the model, else
    /// cpu-q8).
    #[arg(long)]
    pub backend: Option<String>,
    /// The CPU backend at this precision (the seed's short form): q8 or q4 (f32 for cpu-f32).
    #[arg(long, conflicts_with = "backend")]
    pub quant: Option<String>,
    /// Unquantised arithmetic (caldrix's flag): f32 is exact on the CPU (cpu-f32: f16 and bf16 weights widened);
    /// bf16 is the GPU's (gpu-bf16: f16 weights rounded to bf16).
    #[arg(long, value_parser = ["f32", "bf16"], conflicts_with_all = ["backend", "quant"])]
    pub dtype: Option<String>,
    /// Tokens this run's prompt and reply may take together (default: the model's context); refused above it, and
    /// above a Qwen model's active sliding window, which kvad runs as a narrower context.
    #[arg(long)]
    pub ctx: Option<usize>,
    /// Worker threads (default: physical cores).
    #[arg(long)]
    pub threads: Option<usize>,
}

impl ModelArgs {
    /// The backend `--backend`, `--quant` or `--dtype` names (None: none of them; the default choice applies).
    pub fn named_backend(&self) -> anyhow::Result<Option<String>> {
        Ok(match (self.quant.as_deref(), self.dtype.as_deref(), &self.backend) {
            (Some("q8"), ..) => Some("cpu-q8".into()),
            (Some("q4"), ..) => Some("cpu-q4".into()),
            (Some("f32"), ..) => Some("cpu-f32".into()),
            (Some(other), ..) => anyhow::bail!("--quant {other:?} is not one of q8, q4, f32"),
            (None, Some("f32"), _) => Some("cpu-f32".into()),
            (None, Some("bf16"), _) => Some("gpu-bf16".into()),
            (None, Some(other), _) => anyhow::bail!("--dtype {other:?} is not one of f32, bf16"),
            (None, None, b) => b.clone(),
        })
    }
}

/// `kvad run`.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The prompt.
    #[arg(short, long)]
    pub prompt: String,
    /// Print the top-N alternatives with log-probabilities for each token to stderr.
    #[arg(long)]
    pub logprobs: Option<usize>,
}
