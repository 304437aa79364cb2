//! A whole PD service from one InferenceDeployment on the real kube-apiserver, etcd and
//! kube-controller-manager of `scripts/control-plane.sh`: prefill and decode pods, the router's
//! Deployment (its pods made by the real Deployment and ReplicaSet controllers), its Service as
//! status.endpoint; the router's selectors select exactly the servers kvpilot made; its
//! ServiceAccount may read pods in its namespace and nothing else (asked with a TokenRequest
//! token); a deleted router comes back; deleting the resource removes everything (the real
//! garbage collector).

mod common;
mod fleet;
mod kubelet;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::json;

use fleet::{Fleet, condition, label, until};
use kubelet::Timing;

fn quick() -> Timing {
    Timing::new(Duration::from_millis(200), Duration::from_millis(300))
}

fn args_of(pod: &Pod) -> Vec<String> {
    pod.spec.as_ref().unwrap().containers[0].args.clone().unwrap_or_default()
}

/// The `key=value` items after `flag` in the router's arguments, up to the next flag.
fn selector_after(args: &[String], flag: &str) -> String {
    let at = args.iter().position(|a| a == flag).unwrap_or_else(|| panic!("{flag} in {args:?}")) + 1;
    args[at..].iter().take_while(|a| !a.starts_with("--")).cloned().collect::<Vec<_>>().join(",")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_resource_is_a_working_pd_service() {
    let cluster = cluster_or_skip!();
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": kubelet::NODE}});
    let out = cluster.kubectl_with_input(&["apply", "--server-side", "-f", "-"], &node.to_string());
    assert!(out.status.success(), "{}", common::cluster::text(&out.stderr));
    let fleet = Fleet::new(&cluster, "service", quick()).await;
    let mut operator = fleet.operator(&[], &[]);
    let name = fleet.create(&fleet.pd_example("llama-3.1-8b-full.yaml", |o| {
        o["spec"]["decode"]["replicas"] = json!(2);
        // Two prefill replicas of its own, not the example's ratio of decode.
        let prefill = o["spec"]["prefill"].as_object_mut().unwrap();
        for follows in ["ratio", "minReplicas", "maxReplicas"] {
            prefill.remove(follows);
        }
        prefill.insert("replicas".into(), json!(2));
    }));
    let resource = fleet.converged(&name, 2).await;
    let status = resource.status.clone().unwrap();
    let ns = fleet.ns().to_string();
    assert_eq!(status.endpoint.as_deref(), Some(format!("http://{name}-router.{ns}.svc:8000").as_str()));
    assert_eq!(status.prefill.as_ref().map(|p| p.ready_replicas), Some(2));
    assert_eq!(status.router.as_ref().map(|r| r.ready_replicas), Some(1), "counted from the real Deployment");
    assert_eq!(condition(&resource, "Ready").unwrap().reason, "ServiceReady");

    // The router's selectors, as the router reads them, select exactly the servers kvpilot made.
    let deployments: Api<Deployment> = Api::namespaced(fleet.cluster.client().await, &ns);
    let router = deployments.get(&format!("{name}-router")).await.unwrap();
    let template = router.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let router_args = template.containers[0].args.clone().unwrap();
    for (flag, role) in [("--prefill-selector", "prefill"), ("--decode-selector", "decode")] {
        let selector = selector_after(&router_args, flag);
        let mut selected: Vec<String> = fleet
            .pods()
            .list(&ListParams::default().labels(&selector))
            .await
            .unwrap()
            .items
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        selected.sort();
        assert_eq!(selected, [format!("{name}-{role}-0"), format!("{name}-{role}-1")], "{flag} {selector}");
    }
    let prefill = fleet.pods().get(&format!("{name}-prefill-0")).await.unwrap();
    let args = args_of(&prefill);
    let at = args.iter().position(|a| a == "--disaggregation-bootstrap-port").unwrap();
    let annotation = prefill.metadata.annotations.as_ref().unwrap()["sglang.ai/bootstrap-port"].clone();
    assert_eq!((args[at + 1].as_str(), annotation.as_str()), ("8998", "8998"), "the router reads the annotation");
    assert_eq!(label(&prefill, "kvpilot.dev/rank"), "0");

    // The router's identity, through a TokenRequest token: read pods here, nothing else.
    let dir = tempfile::tempdir().unwrap();
    let router_kubeconfig = cluster.service_account_kubeconfig(dir.path(), &ns, &format!("{name}-router"));
    let can = |args: &[&str]| {
        let mut full = vec!["auth", "can-i"];
        full.extend_from_slice(args);
        common::cluster::text(&cluster.kubectl_as(&router_kubeconfig, &full, None).stdout).trim().to_string()
    };
    for verb in ["get", "list", "watch"] {
        assert_eq!(can(&[verb, "pods", "-n", &ns]), "yes", "{verb} pods in its namespace");
    }
    assert_eq!(can(&["list", "pods", "-n", "default"]), "no", "another namespace");
    assert_eq!(can(&["list", "pods", "--all-namespaces"]), "no", "every namespace");
    for (verb, what) in
        [("create", "pods"), ("delete", "pods"), ("patch", "pods"), ("get", "secrets"), ("list", "services")]
    {
        assert_eq!(can(&[verb, what, "-n", &ns]), "no", "{verb} {what}");
    }

    // A deleted router comes back.
    let uid = router.metadata.uid.clone().unwrap();
    deployments.delete(&format!("{name}-router"), &DeleteParams::default()).await.unwrap();
    until("the router Deployment back", async || {
        let back = deployments.get_opt(&format!("{name}-router")).await.ok()??;
        (back.metadata.uid.as_deref() != Some(uid.as_str())).then_some(())
    })
    .await;
    fleet.converged(&name, 2).await;

    // Deleting the resource removes every object it owns, the router's identity included.
    cluster.kubectl_ok(&["delete", "infd", &name, "-n", &ns, "--wait=false"]);
    until("everything the resource owned gone", async || {
        let out = cluster.kubectl(&[
            "get",
            "pods,services,serviceaccounts,roles,rolebindings,deployments,configmaps",
            "-n",
            &ns,
            "-l",
            &format!("app.kubernetes.io/instance={name}"),
            "-o",
            "name",
        ]);
        common::cluster::text(&out.stdout).trim().is_empty().then_some(())
    })
    .await;
    operator.assert_no_failures().await;
}
