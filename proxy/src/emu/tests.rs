//! The backend conformance suite instantiated for the emulated device.

use std::sync::Arc;

use super::memory::tests::window;
use super::Emu;
use crate::backend::Backend;
use crate::hostmem::AppMemory;

fn emu() -> Emu {
    let e = Emu::with_window(window(), 1 << 34).unwrap();
    e.attach_app(Arc::new(AppMemory::new(std::process::id())));
    e
}

crate::backend_conformance_tests!(super::emu);
