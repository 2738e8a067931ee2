//! Restart: rebuild a process from an image at its original addresses and hand over to the
//! agent inside it.
#![deny(unsafe_code)]
