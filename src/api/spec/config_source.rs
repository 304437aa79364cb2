//! Where a model's config.json comes from (`spec.model.config`, and the speculative draft's).

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::MODEL_CONFIG_FIELD;
use crate::api::schema::preserve_unknown_object;

/// Exactly one source of the model's config.json.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "(has(self.inline) ? 1 : 0) + (has(self.configMapRef) ? 1 : 0) + (has(self.hub) ? 1 : 0) == 1"
).message("set exactly one of config.inline, config.configMapRef or config.hub"))]
pub struct ModelConfigSource {
    /// The model's config.json as a JSON object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub inline: Option<serde_json::Map<String, serde_json::Value>>,
    /// A key of a ConfigMap in the same namespace that holds the config.json text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<ConfigMapKeyRef>,
    /// Fetch config.json over HTTPS from a Hugging Face-compatible hub.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hub: Option<HubSource>,
}

/// The one config source a `ModelConfigSource` names, or why it names none or several.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ConfigSourceRef<'a> {
    /// `spec.model.config.inline`.
    Inline(&'a serde_json::Map<String, serde_json::Value>),
    /// `spec.model.config.configMapRef`.
    ConfigMap(&'a ConfigMapKeyRef),
    /// `spec.model.config.hub`.
    Hub(&'a HubSource),
}

impl ModelConfigSource {
    /// The single source set, or an error naming the fields when zero or several are set
    /// (the CRD's CEL rule refuses that at admission; this covers offline checks).
    pub fn source(&self) -> Result<ConfigSourceRef<'_>, String> {
        self.source_at(MODEL_CONFIG_FIELD)
    }

    /// [`Self::source`] for the source at `field` (`spec.model.config`, or the draft's).
    pub fn source_at(&self, field: &str) -> Result<ConfigSourceRef<'_>, String> {
        let mut set = Vec::new();
        if self.inline.is_some() {
            set.push("inline");
        }
        if self.config_map_ref.is_some() {
            set.push("configMapRef");
        }
        if self.hub.is_some() {
            set.push("hub");
        }
        match (set.as_slice(), self) {
            ([_], Self { inline: Some(v), .. }) => Ok(ConfigSourceRef::Inline(v)),
            ([_], Self { config_map_ref: Some(r), .. }) => Ok(ConfigSourceRef::ConfigMap(r)),
            ([_], Self { hub: Some(h), .. }) => Ok(ConfigSourceRef::Hub(h)),
            ([], _) => Err(format!("{field}: none of inline, configMapRef or hub is set; set exactly one")),
            _ => {
                Err(format!("{field}: {} are all set; set exactly one of inline, configMapRef or hub", set.join(", ")))
            }
        }
    }
}

/// A key in a ConfigMap of the resource's namespace.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapKeyRef {
    /// Name of the ConfigMap.
    pub name: String,
    /// Key holding the config.json text.
    #[serde(default = "default_config_key")]
    pub key: String,
}

fn default_config_key() -> String {
    "config.json".into()
}

/// A Hugging Face-compatible hub to fetch `<endpoint>/<repo>/resolve/<revision>/config.json` from.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HubSource {
    /// Repository id on the hub; defaults to spec.model.name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    /// Revision (branch, tag or commit); defaults to `main`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Hub base URL; defaults to `https://huggingface.co` (or the operator's `--hub-endpoint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// A Secret key in the same namespace holding a bearer token for gated or private models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_secret_ref: Option<SecretKeyRef>,
}

/// A key in a Secret of the resource's namespace.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Name of the Secret.
    pub name: String,
    /// Key holding the token.
    #[serde(default = "default_token_key")]
    pub key: String,
}

fn default_token_key() -> String {
    "token".into()
}
