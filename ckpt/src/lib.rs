//! Checkpoints: the image format (writer and reader), capture of a running process by the
//! agent thread inside it, and the forked image writer.
#![deny(unsafe_code)]

pub mod agent;
pub mod alloc;
pub mod arch;
pub mod attrs;
pub mod capture;
pub mod control;
pub mod highfd;
pub mod highmem;
pub mod image;
pub mod inotify;
pub mod job;
pub mod lazy;
pub mod lineage;
pub mod program_end;
pub mod sockets;
pub mod state;
pub mod threads;
pub mod writes;
