//! The `InferenceDeployment` custom resource (group `kvpilot.dev`, version `v1alpha1`) and the
//! data types that `layout` and `policy` produce, so that every layer shares one contract.

mod crd;
mod layout_types;
mod quantity;
mod schema;
mod spec;
mod status;
pub mod validation;

pub use crd::crd;
pub use layout_types::*;
pub use quantity::{format_bytes, parse_bytes, parse_capacity, parse_millis};
pub use spec::*;
pub use status::*;

/// The API group of every kvpilot resource.
pub const GROUP: &str = "kvpilot.dev";
