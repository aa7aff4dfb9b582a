#![cfg(feature = "kafka")]
