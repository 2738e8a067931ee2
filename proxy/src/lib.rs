//! The proxy: the process that owns the device. Server loop, handle tables, and the device
//! backends (`emu`, the PTX interpreter on the CPU; `cuda`, a real GPU via the driver API).
#![deny(unsafe_code)]
