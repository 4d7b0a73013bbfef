//! The memory store against the shared store conformance suite.
#![cfg(feature = "testing")]

payhook_core::store_conformance_tests!(payhook_core::MemoryStore::new());
