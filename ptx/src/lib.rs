//! The PTX engine behind the emulated device: fat binary extraction, PTX parsing and
//! decoding, and a CPU interpreter for kernels.
#![deny(unsafe_code)]
