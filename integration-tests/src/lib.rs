//! Helpers for the integration tests: building test programs and running them under crum.
#![deny(unsafe_code)]
