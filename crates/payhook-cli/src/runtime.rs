//! The async runtime a subcommand runs on: built once per command, its
//! failure to start reported like any other failure.

use std::future::Future;

use crate::failure::Failure;

/// How many threads the runtime drives.
#[derive(Debug, Clone, Copy)]
pub enum Threads {
    /// The calling thread only: a client that waits on the network.
    One,
    /// A worker per core: a server answering requests while it delivers.
    #[cfg(feature = "emulate")]
    PerCore,
}

/// Runs `work` to its end on a new runtime.
pub fn block_on(threads: Threads, work: impl Future<Output = Result<(), Failure>>) -> Result<(), Failure> {
    let mut builder = match threads {
        Threads::One => tokio::runtime::Builder::new_current_thread(),
        #[cfg(feature = "emulate")]
        Threads::PerCore => tokio::runtime::Builder::new_multi_thread(),
    };
    let runtime = builder
        .enable_all()
        .build()
        .map_err(|err| Failure::usage(format_args!("cannot start the async runtime: {err}")))?;
    runtime.block_on(work)
}
