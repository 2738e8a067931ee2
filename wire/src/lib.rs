//! The wire protocol between the interposer (in the application) and the proxy (which owns
//! the device): request/response messages and the shared-memory channel they travel on.
//! Neither side links the other; both link this crate.
#![deny(unsafe_code)]
