//! The preloaded library (`libcrum.so`, SONAME `libcudart.so.13`): the CUDA runtime API as
//! the application sees it, forwarded to the proxy; shadow managed pages; and the start of
//! the checkpoint agent.
#![deny(unsafe_code)]

mod agent_hook;
