//! The checkpoint agent: a thread inside the application, started by the preloaded library.

/// Starts the agent if this process runs under `crum run` (its environment says so);
/// otherwise does nothing. Called once from the preloaded library's constructor.
pub fn start_from_env() {}
