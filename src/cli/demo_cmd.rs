//! `kvpilot demo`: the real controller against the in-process API server with the bundled
//! examples, a simulated kubelet marking pods (and the router Deployments) ready, and what
//! `kubectl get` would show.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use serde::Deserialize;
use serde_json::Value;

use crate::api::InferenceDeployment;
use crate::apiserver::{ApiServer, kubelet};
use crate::controller::desired::{
    DECODE_APP, LABEL_NAME, LABEL_RANK, LABEL_REVISION, PREFILL_APP, ROUTER_APP, RenderOptions,
};
use crate::controller::metrics::Metrics;
use crate::controller::{self, Context, Scope};
use crate::sglang::cmdline::shell_quote;
use crate::source::{ClusterSource, DEFAULT_HUB_ENDPOINT, HubClient};

/// The examples shipped in `examples/`, compiled in so the demo needs no files.
const EXAMPLES: &[(&str, &str)] = &[
    ("llama-3.1-8b-full.yaml", include_str!("../../examples/llama-3.1-8b-full.yaml")),
    ("gpt-oss-20b-hybrid-swa.yaml", include_str!("../../examples/gpt-oss-20b-hybrid-swa.yaml")),
    ("mimo-pure-swa-rewrite.yaml", include_str!("../../examples/mimo-pure-swa-rewrite.yaml")),
    ("qwen3-next-hybrid-ssm.yaml", include_str!("../../examples/qwen3-next-hybrid-ssm.yaml")),
    ("deepseek-v3-mla-rejected.yaml", include_str!("../../examples/deepseek-v3-mla-rejected.yaml")),
    ("gemma-3-1b-sliding-full-pool.yaml", include_str!("../../examples/gemma-3-1b-sliding-full-pool.yaml")),
    ("deepseek-v3-tp16-multinode.yaml", include_str!("../../examples/deepseek-v3-tp16-multinode.yaml")),
    ("deepseek-v4-eagle-draft.yaml", include_str!("../../examples/deepseek-v4-eagle-draft.yaml")),
];

#[derive(Args, Debug)]
pub(crate) struct DemoArgs {
    /// Give up if the examples have not settled by then.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    timeout_seconds: u64,
    /// How long the simulated kubelet takes to report a pod ready.
    #[arg(long, value_name = "MILLISECONDS", default_value_t = 300)]
    pod_start_ms: u64,
}

fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_)
}

/// Settled: rejected, unresolved, or ready.
fn settled(object: &Value) -> bool {
    let status = |t| condition(object, t).and_then(|c| c["status"].as_str()).unwrap_or_default();
    status("Ready") == "True" || status("SettingsValid") == "False" || status("ModelResolved") == "False"
}

fn table(rows: Vec<Vec<String>>) -> String {
    let widths: Vec<usize> =
        (0..rows[0].len()).map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
    rows.iter()
        .map(|row| {
            row.iter()
                .enumerate()
                .map(|(i, cell)| format!("{cell:<w$}", w = widths[i]))
                .collect::<Vec<_>>()
                .join("   ")
                .trim_end()
                .to_string()
                + "\n"
        })
        .collect()
}

/// An age as kubectl prints it: seconds up to two minutes, then minutes (with seconds under ten),
/// hours (with minutes under eight) and days (with hours under eight).
fn age(seconds: i64) -> String {
    let (minutes, hours, days) = (seconds / 60, seconds / 3600, seconds / 86_400);
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if minutes < 10 && s % 60 != 0 => format!("{minutes}m{}s", s % 60),
        _ if hours < 3 => format!("{minutes}m"),
        _ if hours < 8 && minutes % 60 != 0 => format!("{hours}h{}m", minutes % 60),
        _ if hours < 48 => format!("{hours}h"),
        _ if days < 8 && hours % 24 != 0 => format!("{days}d{}h", hours % 24),
        _ => format!("{days}d"),
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

async fn load_examples(server: &ApiServer) -> Result<usize, String> {
    let client = server.client();
    let mut count = 0;
    for (file, text) in EXAMPLES {
        for document in serde_norway::Deserializer::from_str(text) {
            let value = Value::deserialize(document).map_err(|e| format!("{file}: {e}"))?;
            let namespace = value["metadata"]["namespace"].as_str().unwrap_or("default").to_string();
            match value["kind"].as_str() {
                Some("ConfigMap") => {
                    let config_map: ConfigMap = serde_json::from_value(value).map_err(|e| format!("{file}: {e}"))?;
                    Api::<ConfigMap>::namespaced(client.clone(), &namespace)
                        .create(&PostParams::default(), &config_map)
                        .await
                        .map_err(|e| format!("{file}: {e}"))?;
                }
                Some("InferenceDeployment") => {
                    let resource: InferenceDeployment =
                        serde_json::from_value(value).map_err(|e| format!("{file}: {e}"))?;
                    Api::<InferenceDeployment>::namespaced(client.clone(), &namespace)
                        .create(&PostParams::default(), &resource)
                        .await
                        .map_err(|e| format!("{file}: {e}"))?;
                    count += 1;
                }
                _ => {}
            }
        }
    }
    Ok(count)
}

fn report(server: &ApiServer, elapsed: Duration) -> String {
    let mut out = format!(
        "kvpilot demo: the controller settled {} InferenceDeployments in {:.1} s\n\n",
        server.list("kvpilot.dev", "v1alpha1", "inferencedeployments", None).len(),
        elapsed.as_secs_f64()
    );
    out += "$ kubectl get infd -A -o wide\n";
    // The CRD's printer columns, those of priority 1 included.
    let mut rows = vec![
        [
            "NAMESPACE",
            "NAME",
            "MODEL",
            "LAYOUT",
            "BACKUP",
            "SETTINGS",
            "READY",
            "DESIRED",
            "PREFILL",
            "ENDPOINT",
            "AGE",
        ]
        .map(String::from)
        .to_vec(),
    ];
    let now = Timestamp::now();
    for d in server.list("kvpilot.dev", "v1alpha1", "inferencedeployments", None) {
        let settings = condition(&d, "SettingsValid").map(|c| text(&c["reason"])).unwrap_or_else(|| "-".into());
        let created = d["metadata"]["creationTimestamp"].as_str().and_then(|t| t.parse::<Timestamp>().ok());
        rows.push(vec![
            text(&d["metadata"]["namespace"]),
            text(&d["metadata"]["name"]),
            text(&d["spec"]["model"]["name"]),
            text(&d["status"]["layout"]["kvPool"]),
            text(&d["status"]["effective"]["retractionBackup"]),
            settings,
            text(&d["status"]["decode"]["readyReplicas"]).replace('-', "0"),
            text(&d["spec"]["decode"]["replicas"]),
            text(&d["status"]["prefill"]["readyReplicas"]),
            text(&d["status"]["endpoint"]),
            created.map_or_else(|| "-".into(), |created| age(now.duration_since(created).as_secs())),
        ]);
    }
    out += &table(rows);
    out += "\n$ kubectl get pods -A -l 'app.kubernetes.io/name in (kvpilot-prefill,kvpilot-decode)' -o wide\n";
    let mut rows =
        vec![["NAMESPACE", "NAME", "READY", "STATUS", "IP", "NODE", "IMAGE", "REVISION"].map(String::from).to_vec()];
    let pods: Vec<Value> = server
        .list("", "v1", "pods", None)
        .into_iter()
        .filter(|p| [PREFILL_APP, DECODE_APP].map(Value::from).contains(&p["metadata"]["labels"][LABEL_NAME]))
        .collect();
    for pod in &pods {
        let ready = pod["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
        rows.push(vec![
            text(&pod["metadata"]["namespace"]),
            text(&pod["metadata"]["name"]),
            if ready { "1/1" } else { "0/1" }.into(),
            text(&pod["status"]["phase"]).replace('-', "Pending"),
            text(&pod["status"]["podIP"]),
            text(&pod["spec"]["nodeName"]),
            text(&pod["spec"]["containers"][0]["image"]),
            text(&pod["metadata"]["labels"][LABEL_REVISION]),
        ]);
    }
    out += &table(rows);
    out += "\n$ kubectl get deployments -A -l app.kubernetes.io/name=kvpilot-router\n";
    let mut rows = vec![["NAMESPACE", "NAME", "READY", "IMAGE"].map(String::from).to_vec()];
    for deployment in server.list("apps", "v1", "deployments", None) {
        if deployment["metadata"]["labels"][LABEL_NAME] != ROUTER_APP {
            continue;
        }
        rows.push(vec![
            text(&deployment["metadata"]["namespace"]),
            text(&deployment["metadata"]["name"]),
            format!(
                "{}/{}",
                text(&deployment["status"]["readyReplicas"]).replace('-', "0"),
                text(&deployment["spec"]["replicas"])
            ),
            text(&deployment["spec"]["template"]["spec"]["containers"][0]["image"]),
        ]);
    }
    out += &table(rows);
    if let Some(pod) = pods.iter().find(|p| p["metadata"]["labels"][LABEL_RANK] == "1").or(pods.first()) {
        let name = text(&pod["metadata"]["name"]);
        let words: Vec<String> = ["command", "args"]
            .iter()
            .flat_map(|key| pod["spec"]["containers"][0][key].as_array().cloned().unwrap_or_default())
            .map(|word| shell_quote(&text(&word)))
            .collect();
        out += &format!(
            "\n$ kubectl get pod {name} -o jsonpath='{{.spec.containers[0].command}} {{.spec.containers[0].args}}'\n"
        );
        out += &format!("{}\n", words.join(" "));
    }
    out += "\n$ kubectl get infd -A -o custom-columns=NAME:.metadata.name,ENDPOINT:.status.endpoint,\
PREFILL:.status.prefill.endpoints,DECODE:.status.decode.endpoints\n";
    let mut rows = vec![["NAME", "ENDPOINT", "PREFILL", "DECODE"].map(String::from).to_vec()];
    for d in server.list("kvpilot.dev", "v1alpha1", "inferencedeployments", None) {
        let urls = |fleet: &str| {
            let endpoints = d["status"][fleet]["endpoints"].as_array().cloned().unwrap_or_default();
            let urls: Vec<String> = endpoints.iter().map(text).collect();
            if urls.is_empty() { "<none>".into() } else { urls.join(",") }
        };
        let endpoint = d["status"]["endpoint"].as_str().unwrap_or("<none>").to_string();
        rows.push(vec![text(&d["metadata"]["name"]), endpoint, urls("prefill"), urls("decode")]);
    }
    out += &table(rows);
    out += "\n$ kubectl get events -A --field-selector reportingController=kvpilot\n";
    let mut rows = vec![["NAMESPACE", "TYPE", "REASON", "OBJECT", "MESSAGE"].map(String::from).to_vec()];
    for event in server.list("events.k8s.io", "v1", "events", None) {
        rows.push(vec![
            text(&event["metadata"]["namespace"]),
            text(&event["type"]),
            text(&event["reason"]),
            format!("infd/{}", text(&event["regarding"]["name"])),
            text(&event["note"]),
        ]);
    }
    out += &table(rows);
    out +=
        "\n$ kubectl get infd deepseek-v3 -o jsonpath='{.status.conditions[?(@.type==\"SettingsValid\")].message}'\n";
    if let Some(d) = server.get("kvpilot.dev", "v1alpha1", "inferencedeployments", "default", "deepseek-v3") {
        out += &format!("{}\n", condition(&d, "SettingsValid").map(|c| text(&c["message"])).unwrap_or_default());
    }
    out
}

async fn demo(args: &DemoArgs) -> Result<String, String> {
    let server = ApiServer::new();
    let client = server.client();
    let hub = HubClient::new(Duration::from_secs(60), Duration::from_secs(5), &[]).map_err(|e| e.to_string())?;
    let source = ClusterSource::new(client.clone(), Arc::new(hub), DEFAULT_HUB_ENDPOINT);
    let options = RenderOptions::default();
    let context = Arc::new(Context::new(client.clone(), source, options, Metrics::default()));
    let pod_start = Duration::from_millis(args.pod_start_ms);
    let kubelet = kubelet::spawn(client.clone(), &format!("{LABEL_NAME} in ({DECODE_APP},{PREFILL_APP})"), pod_start);
    let routers = kubelet::spawn_deployments(client, &format!("{LABEL_NAME}={ROUTER_APP}"), pod_start);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let operator = tokio::spawn(controller::run(context, Scope::All, async move {
        let _ = stopped.await;
    }));
    let start = Instant::now();
    let expected = load_examples(&server).await?;
    let timeout = Duration::from_secs(args.timeout_seconds);
    loop {
        let deployments = server.list("kvpilot.dev", "v1alpha1", "inferencedeployments", None);
        if deployments.len() == expected && deployments.iter().all(settled) {
            break;
        }
        if start.elapsed() > timeout {
            return Err(format!(
                "the examples did not settle within {timeout:?}\n{}",
                report(&server, start.elapsed())
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elapsed = start.elapsed();
    let _ = stop.send(());
    let _ = operator.await;
    kubelet.abort();
    routers.abort();
    Ok(report(&server, elapsed))
}

pub(crate) fn run(args: &DemoArgs) -> ExitCode {
    let runtime = match super::serve::runtime() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("kvpilot demo: cannot start: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(demo(args)) {
        Ok(report) => super::print_stdout(&report),
        Err(e) => {
            eprintln!("kvpilot demo: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_as_kubectl_prints_them() {
        let ages = [(5, "5s"), (119, "119s"), (125, "2m5s"), (600, "10m"), (3 * 3600 + 60, "3h1m")];
        let more = [(9 * 3600, "9h"), (50 * 3600, "2d2h"), (10 * 86_400, "10d")];
        for (seconds, shown) in ages.into_iter().chain(more) {
            assert_eq!(age(seconds), shown, "{seconds} s");
        }
    }
}
