//! The Redis store against the shared store conformance suite, on the server
//! named by `PAYHOOK_TEST_REDIS_URL`.

payhook_core::store_conformance_tests!(crate::common::shared_store());
