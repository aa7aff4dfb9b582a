//! What the run service hands its doors: the run views, whose one home is the wire contracts
//! (`metaforge_api::run_views`); re-exported here for the service's callers.

pub use metaforge_api::run_views::*;
