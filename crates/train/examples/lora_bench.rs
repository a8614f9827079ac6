//! LoRA step time on the CPU, for `bench/train/lora-cpu.py` (which runs PyTorch + peft beside it on the same model
//! and interleaves the two): rank 16, alpha 32, every projection, AdamW, random token rows.
//!
//!     cargo run --release -p kvad-train --example lora_bench -- MODEL_DIR BATCH SEQ STEPS
//!
//! Prints one JSON line: the seconds of each step after the first (warm-up) and the loss of the last.

use kvad_train::{Batch, LoraSpec, TrainConfig, Trainer};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir, batch, seq, steps] = <[String; 4]>::try_from(args).map_err(|_| "MODEL_DIR BATCH SEQ STEPS")?;
    let (batch, seq, steps): (usize, usize, usize) = (batch.parse()?, seq.parse()?, steps.parse()?);
    let mut net = kvad_train::open(std::path::Path::new(&dir))?;
    let vocab = net.config().vocab_size as u64;
    let targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"];
    let spec =
        LoraSpec { rank: 16, alpha: 32.0, targets: targets.iter().map(|s| s.to_string()).collect(), rslora: false };
    net.add_lora(&spec, 0)?;
    let mut tr = Trainer::new(net, TrainConfig { lr: 1e-4, warmup: 0, steps: steps + 1, ..Default::default() });
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut token = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % vocab) as u32
    };
    let mut times = Vec::new();
    let mut loss = 0.0;
    for i in 0..=steps {
        let rows: Vec<Vec<u32>> = (0..batch).map(|_| (0..seq).map(|_| token()).collect()).collect();
        let b = Batch::shifted(&rows, None)?;
        let t0 = std::time::Instant::now();
        loss = tr.step(&[b])?.loss;
        if i > 0 {
            times.push(t0.elapsed().as_secs_f64());
        }
    }
    println!("{}", serde_json::json!({"engine": "kvad", "step_s": times, "loss": loss}));
    Ok(())
}
