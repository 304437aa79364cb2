//! Which gang schedulers' APIs the cluster serves, from API discovery (which every
//! authenticated client may read; no RBAC rule is needed). The controller and the webhook ask
//! before they accept a resource whose `spec.scheduling.gang` needs one: a PodGroup nobody
//! schedules, or Kueue labels nobody reads, would leave its pods Pending for ever. Each answer
//! is kept for [`RECHECK`], so an installed or removed scheduler is seen within that time
//! without a discovery request per reconcile.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::api::{InferenceDeploymentSpec, SchedulerApi};

/// How long an answer of discovery stands.
pub const RECHECK: Duration = Duration::from_secs(10);

/// Discovery answers about the gang schedulers' APIs, shared by every reconcile and review.
pub struct ServedApis {
    client: kube::Client,
    answers: Mutex<HashMap<SchedulerApi, (Instant, bool)>>,
}

impl ServedApis {
    pub fn new(client: kube::Client) -> Self {
        Self { client, answers: Mutex::new(HashMap::new()) }
    }

    /// The API `spec`'s gang scheduler needs and the cluster does not serve, if any.
    pub async fn missing_for(&self, spec: &InferenceDeploymentSpec) -> Result<Option<SchedulerApi>, kube::Error> {
        let Some(api) = spec.scheduling.as_ref().and_then(|s| s.gang.required_api()) else { return Ok(None) };
        Ok((!self.serves(api).await?).then_some(api))
    }

    /// Whether the cluster serves `api`, as discovery said within the last [`RECHECK`].
    pub async fn serves(&self, api: SchedulerApi) -> Result<bool, kube::Error> {
        let known = self.answers.lock().unwrap_or_else(|p| p.into_inner()).get(&api).copied();
        if let Some((_, served)) = known.filter(|(at, _)| at.elapsed() < RECHECK) {
            return Ok(served);
        }
        let served = self.discover(api).await?;
        self.answers.lock().unwrap_or_else(|p| p.into_inner()).insert(api, (Instant::now(), served));
        Ok(served)
    }

    async fn discover(&self, api: SchedulerApi) -> Result<bool, kube::Error> {
        let version = match api.version {
            Some(version) => version.to_string(),
            None => {
                let groups = self.client.list_api_groups().await?;
                let group = groups.groups.into_iter().find(|group| group.name == api.group);
                match group.and_then(|group| group.preferred_version.or_else(|| group.versions.into_iter().next())) {
                    Some(preferred) => preferred.version,
                    None => return Ok(false),
                }
            }
        };
        match self.client.list_api_group_resources(&format!("{}/{version}", api.group)).await {
            Ok(resources) => Ok(resources.resources.iter().any(|resource| resource.name == api.resource)),
            // A group or version the API server does not know.
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
            Err(e) => Err(e),
        }
    }
}
