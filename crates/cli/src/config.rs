//! The command line's settings from the environment, read here and nowhere else (the server's are
//! `kvad_server::config`, the Hub's `kvad_hub::config`, the GPU's `kvad_tensor::cuda::config`).

/// `KVAD_API_KEY`: the key sent to a server, before any stored one.
pub(crate) fn api_key() -> Option<String> {
    std::env::var("KVAD_API_KEY").ok().filter(|k| !k.is_empty())
}

/// `KVAD_URL`: the server to send commands to, before `kvad.toml`'s `[client] url` and the service's address.
pub(crate) fn url() -> Option<String> {
    std::env::var("KVAD_URL").ok().filter(|u| !u.is_empty())
}
