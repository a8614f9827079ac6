//! The prompt reader: templating and tokenising a prompt runs on this thread, not the engine's, so a long prompt
//! (a megabyte of text is most of a second) holds none of the streams the engine is writing. The engine thread
//! hands it a model's [`Reader`] with the prompt; the result waits in the shared state for the engine thread to
//! take in, and the engine thread is woken. One prompt is read at a time, in the line's order, as the seed says.

use super::core::JobId;
use super::queue::Shared;
use crate::error::ApiError;
use kvad_engine::seam::{Prompt, Reader};
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;

/// A prompt to read.
pub(crate) struct ReadJob {
    /// The generation it is.
    pub(crate) id: JobId,
    /// Its model's reader.
    pub(crate) reader: Arc<dyn Reader>,
    /// The prompt.
    pub(crate) prompt: Prompt,
    /// Whether the reader's model was loaded for it.
    pub(crate) loaded: bool,
}

/// Starts the reader thread; it ends when the sender is dropped.
pub(crate) fn start(shared: Arc<Shared>) -> Sender<ReadJob> {
    let (tx, rx) = channel::<ReadJob>();
    std::thread::Builder::new()
        .name("kvad-read".into())
        .spawn(move || {
            for job in rx {
                let result = job.reader.read(&job.prompt).map_err(ApiError::from).map(|mut p| {
                    p.loaded = job.loaded;
                    p
                });
                let mut st = shared.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                st.read.push((job.id, result));
                drop(st);
                shared.wake.notify_all();
            }
        })
        .expect("spawning the prompt reader thread");
    tx
}
