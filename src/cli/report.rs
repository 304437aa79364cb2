//! The pieces of `check`'s report that resources and workloads share.

use serde::Serialize;

use crate::api::AttentionLayout;

/// A resource or server that was not checked because its config.json could not be read.
#[derive(Serialize)]
pub(crate) struct Unchecked {
    /// `NAMESPACE/NAME` of a resource, `deploy/NAME container C` of a server.
    pub(crate) name: String,
    pub(crate) source: String,
    /// Always `unchecked`: the JSON report lists these beside the verdicts.
    pub(crate) verdict: &'static str,
    /// Why, with where its config.json is.
    pub(crate) reason: String,
}

impl Unchecked {
    pub(crate) fn new(name: String, source: String, reason: String) -> Self {
        Self { name, source, verdict: "unchecked", reason }
    }
}

/// `  layout: …` of a report.
pub(crate) fn layout_line(l: &AttentionLayout) -> String {
    format!(
        "  layout: {} {} — {} layers ({} full, {} sliding, {} ssm){}, attention {}\n",
        l.architecture,
        l.kv_pool.as_str(),
        l.layers.total,
        l.layers.full_attention,
        l.layers.sliding_window,
        l.layers.ssm,
        l.sliding_window.map(|w| format!(", window {w}")).unwrap_or_default(),
        if l.attention == crate::api::AttentionKind::Mla { "mla" } else { "mha" },
    )
}
