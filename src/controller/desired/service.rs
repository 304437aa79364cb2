//! A fleet's headless Service `NAME-ROLE`: stable DNS names for its pods.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{FleetRole, managed_labels, owned_meta, service_name};

/// The headless Service of the `role` fleet of `name`, selecting its pods by `selector` and
/// serving their HTTP port `port`.
pub(super) fn headless_service(
    name: &str,
    namespace: &Option<String>,
    role: FleetRole,
    selector: &BTreeMap<String, String>,
    port: i32,
    owner: &OwnerReference,
) -> Service {
    Service {
        metadata: owned_meta(service_name(name, role), namespace, managed_labels(selector), owner),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some(selector.clone()),
            // Ranks find rank 0 by name before any of them is ready.
            publish_not_ready_addresses: Some(true),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port,
                target_port: Some(IntOrString::String("http".into())),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}
