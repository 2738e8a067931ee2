//! The PTX engine behind the emulated device: fat binary extraction ([`fatbin`]), PTX
//! parsing and decoding ([`Module::parse`]; [`Module::link`] for the relocatable modules of a
//! program built with `nvcc -rdc=true`), and a CPU interpreter for kernels ([`launch`]).
//!
//! A module is parsed and decoded once into a flat instruction form (opcode, type and
//! modifiers decoded separately, registers resolved to indices, labels to instruction
//! indices); launches run that form on a worker [`Pool`]. See `docs/ptx-engine.md`.
#![deny(unsafe_code)]

pub mod fatbin;

mod api;
mod exec;
mod fp;
mod hostmem;
mod ir;
mod link;
mod mem;
mod parse;
mod printf;
mod tex;

pub mod analysis;
pub mod preempt;
pub use api::*;
pub use hostmem::HostMemory;
