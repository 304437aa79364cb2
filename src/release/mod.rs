//! SGLang releases: the version type every release-keyed rule and classification list is
//! keyed by, the releases kvpilot knows, and the choice of one for a resource. The lowest
//! layer: it imports nothing else of the crate.

#[cfg(test)]
mod tests;

use std::fmt;
use std::str::FromStr;

/// One SGLang release as PyPI spells it: `0.5.23`, `0.5.22.post1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Release {
    /// Major version.
    pub major: u16,
    /// Minor version.
    pub minor: u16,
    /// Patch version.
    pub patch: u16,
    /// The `.postN` number; `None` sorts before every post release of the same patch.
    pub post: Option<u16>,
}

impl Release {
    /// A release without a post suffix.
    pub const fn new(major: u16, minor: u16, patch: u16) -> Self {
        Self { major, minor, patch, post: None }
    }

    /// The release kvpilot uses when nothing names one.
    pub fn newest_known() -> Self {
        KNOWN[KNOWN.len() - 1]
    }

    /// The oldest release kvpilot has rules for.
    pub fn oldest_known() -> Self {
        KNOWN[0]
    }

    /// Whether this exact release is one kvpilot has rules for.
    pub fn is_known(self) -> bool {
        KNOWN.contains(&self)
    }
}

/// The transformers version a release's wheel pins: its config classes are part of the
/// release's loader (the parity harness installs the same pins, `tests/parity/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Transformers {
    /// transformers 5.12.1 (SGLang 0.5.17–0.5.21).
    V5_12_1,
    /// transformers 5.19.0 (SGLang 0.5.22 on): per-layer config attributes, read globally, raise.
    V5_19_0,
}

impl Transformers {
    /// The version as pip spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V5_12_1 => "5.12.1",
            Self::V5_19_0 => "5.19.0",
        }
    }
}

impl Release {
    /// The transformers version this release pins (the nearest known one outside 0.5.17–0.5.23).
    pub fn transformers(self) -> Transformers {
        if self >= v0_5(22) { Transformers::V5_19_0 } else { Transformers::V5_12_1 }
    }
}

/// Shorthand for the release `0.5.<patch>`, the only line kvpilot models.
pub const fn v0_5(patch: u16) -> Release {
    Release::new(0, 5, patch)
}

/// Every release kvpilot models, oldest first: what `pip index versions sglang` listed from
/// 0.5.17 on (no post releases exist in that range).
pub const KNOWN: &[Release] = &[v0_5(17), v0_5(18), v0_5(19), v0_5(20), v0_5(21), v0_5(22), v0_5(23)];

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)?;
        match self.post {
            Some(post) => write!(f, ".post{post}"),
            None => Ok(()),
        }
    }
}

/// A version string that is not `[v]MAJOR.MINOR.PATCH[.postN]`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not an SGLang release version: {problem}; write it like 0.5.23 or 0.5.22.post1")]
pub struct ParseReleaseError {
    text: String,
    problem: &'static str,
}

impl FromStr for Release {
    type Err = ParseReleaseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = |problem| ParseReleaseError { text: text.to_string(), problem };
        let bare = text.strip_prefix('v').unwrap_or(text);
        let mut parts = bare.split('.');
        let mut number = |what| -> Result<u16, ParseReleaseError> {
            let part = parts.next().ok_or_else(|| error(what))?;
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(error(what));
            }
            part.parse().map_err(|_| error("a number is too large"))
        };
        let major = number("the major version is missing or not a number")?;
        let minor = number("the minor version is missing or not a number")?;
        let patch = number("the patch version is missing or not a number")?;
        let post = match parts.next() {
            None => None,
            Some(suffix) => {
                let digits = suffix.strip_prefix("post").ok_or_else(|| error("only a .postN suffix may follow"))?;
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(error("the post number is missing or not a number"));
                }
                Some(digits.parse().map_err(|_| error("a number is too large"))?)
            }
        };
        if parts.next().is_some() {
            return Err(error("too many dot-separated parts"));
        }
        Ok(Self { major, minor, patch, post })
    }
}

/// An inclusive range of releases a rule, message or list entry holds for; `last: None` means
/// it still holds in the newest known release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// The first release that has it.
    pub first: Release,
    /// The last release that has it, if it is gone from a later one.
    pub last: Option<Release>,
}

impl Span {
    /// From `first` on.
    pub const fn since(first: Release) -> Self {
        Self { first, last: None }
    }

    /// Every modelled release.
    pub const fn always() -> Self {
        Self::since(v0_5(17))
    }

    /// `first` to `last`, both included.
    pub const fn between(first: Release, last: Release) -> Self {
        Self { first, last: Some(last) }
    }

    /// Whether `release` falls in the span.
    pub fn contains(self, release: Release) -> bool {
        release >= self.first && self.last.is_none_or(|last| release <= last)
    }
}

impl fmt::Display for Span {
    /// `0.5.19+`, `0.5.18`, `0.5.19–0.5.20`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.last {
            None => write!(f, "{}+", self.first),
            Some(last) if last == self.first => write!(f, "{last}"),
            Some(last) => write!(f, "{}–{last}", self.first),
        }
    }
}

/// Where the release a resource is checked against came from, most specific first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseSource {
    /// `spec.sglang.version`.
    Spec,
    /// The tag of `spec.decode.image` (`lmsysorg/sglang:v0.5.23-cu129`).
    Image,
    /// The operator's or CLI's `--sglang-version`.
    Flag,
    /// Nothing named one: the newest known release.
    Default,
}

impl ReleaseSource {
    /// The source as status and reports spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Spec => "Spec",
            Self::Image => "Image",
            Self::Flag => "Flag",
            Self::Default => "Default",
        }
    }
}

/// The release a resource is checked against, how it was chosen, and what was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseChoice {
    /// The profile the rules are evaluated at.
    pub release: Release,
    /// The release that was asked for (differs from `release` when it is newer than any known, or
    /// an image tag older than any known).
    pub requested: Release,
    /// Where the request came from.
    pub source: ReleaseSource,
    /// The server image, when it names no release (`:latest`, no tag, a digest) and the
    /// fallback stands in for what it runs.
    pub unversioned_image: Option<String>,
}

impl Default for ReleaseChoice {
    fn default() -> Self {
        Self::default_newest()
    }
}

impl ReleaseChoice {
    /// The newest known release, chosen because nothing named one.
    pub fn default_newest() -> Self {
        let newest = Release::newest_known();
        Self { release: newest, requested: newest, source: ReleaseSource::Default, unversioned_image: None }
    }

    /// Whether a release kvpilot does not know was asked for and the nearest known profile
    /// stands in: the newest for a newer one, the oldest for an older image tag ([`older_image`]).
    pub fn approximate(&self) -> bool {
        self.requested != self.release
    }

    /// The warning to show when the profile only approximates the requested release, or stands
    /// in for an image that names none.
    pub fn warning(&self) -> Option<String> {
        let (relation, extreme) = if self.requested > self.release { ("newer", "newest") } else { ("older", "oldest") };
        let approximate = self.approximate().then(|| {
            format!(
                "SGLang {} ({}) is {relation} than any release kvpilot knows; its rules are checked as SGLang {}, the \
                 {extreme} known",
                self.requested,
                self.source.as_str(),
                self.release
            )
        });
        let unversioned = self.unversioned_image.as_ref().map(|image| {
            let chosen = match self.source {
                ReleaseSource::Flag => "the --sglang-version kvpilot runs with",
                _ => "the newest release kvpilot knows",
            };
            format!(
                "spec.decode.image {image} names no SGLang release (a latest tag, no tag or a digest); its rules are \
                 checked as SGLang {}, {chosen}: pin the release it runs with spec.sglang.version or a versioned \
                 tag such as lmsysorg/sglang:v{}-cu129",
                self.release, self.release
            )
        });
        match (approximate, unversioned) {
            (Some(a), Some(u)) => Some(format!("{a}; {u}")),
            (a, u) => a.or(u),
        }
    }
}

/// A requested release kvpilot cannot check against.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReleaseError {
    /// The text is not a version.
    #[error(transparent)]
    Malformed(#[from] ParseReleaseError),
    /// Older than the oldest modelled release, or a patch PyPI never published.
    #[error("SGLang {requested} is not a release kvpilot knows; known releases: {known}")]
    Unknown {
        /// The release asked for.
        requested: Release,
        /// The known releases, listed.
        known: String,
    },
    /// The tag of a resource's server image names a release kvpilot does not model.
    #[error(
        "the tag of spec.decode.image {image} names SGLang {requested}, which is not a release kvpilot knows; \
         known releases: {known}; set spec.sglang.version to the known release its settings are to be checked \
         against, or run an image of a known release"
    )]
    UnknownImage {
        /// The image reference.
        image: String,
        /// The release its tag names.
        requested: Release,
        /// The known releases, listed.
        known: String,
    },
}

/// The known releases as a list for messages: `0.5.17, 0.5.18, …`.
pub fn known_list() -> String {
    KNOWN.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// Checks a requested release: a known one is used as is, one newer than every known one gets
/// the newest profile (see [`ReleaseChoice::warning`]), anything else is an error.
pub fn choose(requested: Release, source: ReleaseSource) -> Result<ReleaseChoice, ReleaseError> {
    let newest = Release::newest_known();
    if requested.is_known() {
        Ok(ReleaseChoice { release: requested, requested, source, unversioned_image: None })
    } else if requested > newest {
        Ok(ReleaseChoice { release: newest, requested, source, unversioned_image: None })
    } else {
        Err(ReleaseError::Unknown { requested, known: known_list() })
    }
}

/// The choice for an image whose tag names a release older than any known: the oldest known
/// profile stands in (with [`ReleaseChoice::warning`] saying so), as the closest kvpilot has.
/// None for a tag that is not older than every known release.
pub fn older_image(named: Release) -> Option<ReleaseChoice> {
    let oldest = Release::oldest_known();
    (named < oldest).then_some(ReleaseChoice {
        release: oldest,
        requested: named,
        source: ReleaseSource::Image,
        unversioned_image: None,
    })
}

/// Parses and checks a version string (see [`choose`]).
pub fn choose_text(text: &str, source: ReleaseSource) -> Result<ReleaseChoice, ReleaseError> {
    choose(text.trim().parse()?, source)
}

/// The SGLang release a workload's server is checked against, and a warning where the image's
/// tag was not used: the release the server image's tag names (`image`), else `fallback` (the
/// webhook's or CLI's `--sglang-version`, or the newest known release). kvpilot only checks such
/// servers, so a tag it does not model still gets a verdict: one older than every known release
/// is checked as the oldest known (with [`ReleaseChoice::warning`] saying so), another one as the
/// fallback, with a warning saying why.
pub fn choose_for_workload(image: Option<Release>, fallback: &ReleaseChoice) -> (ReleaseChoice, Option<String>) {
    let Some(named) = image else { return (fallback.clone(), None) };
    match older_image(named).map_or_else(|| choose(named, ReleaseSource::Image), Ok) {
        Ok(choice) => (choice, None),
        Err(e) => (
            fallback.clone(),
            Some(format!(
                "the image tag names SGLang {named}, which kvpilot does not model ({e}); checked as SGLang {}",
                fallback.release
            )),
        ),
    }
}

/// The SGLang release an InferenceDeployment's servers are checked against: the release it pins
/// (`pinned`, spec.sglang.version), else the one the tag of its server `image` names, else
/// `fallback` (the operator's, webhook's or CLI's `--sglang-version`, or the newest known
/// release). kvpilot runs these servers, so a tag naming a release it does not model (older than
/// every known one, or never published) is an error, not a guess; an image that names no release
/// (`:latest`, no tag, a digest) gets the fallback with a warning saying how to pin one.
pub fn choose_for_resource(
    pinned: Option<ReleaseChoice>,
    image: Option<&str>,
    fallback: &ReleaseChoice,
) -> Result<ReleaseChoice, ReleaseError> {
    if let Some(pinned) = pinned {
        return Ok(pinned);
    }
    let Some(image) = image else { return Ok(fallback.clone()) };
    match from_image(image) {
        Some(named) => choose(named, ReleaseSource::Image).map_err(|_| ReleaseError::UnknownImage {
            image: image.to_string(),
            requested: named,
            known: known_list(),
        }),
        None if names_no_release(image) => {
            Ok(ReleaseChoice { unversioned_image: Some(image.to_string()), ..fallback.clone() })
        }
        None => Ok(fallback.clone()),
    }
}

/// Whether `image` is an SGLang image whose tag names no release, or any image referenced by
/// `latest`, by no tag or by digest alone: what it runs changes under the same name, or cannot be
/// read from it.
fn names_no_release(image: &str) -> bool {
    let (reference, digest) = match image.split_once('@') {
        Some((reference, _)) => (reference, true),
        None => (image, false),
    };
    let name_end = reference.rfind('/').map_or(0, |i| i + 1);
    match reference[name_end..].split_once(':') {
        None => true,
        Some((_, "latest")) => true,
        Some((name, _)) => !digest && name.to_ascii_lowercase().contains("sglang"),
    }
}

/// The SGLang release an SGLang image's tag names (a repository whose name contains `sglang`),
/// for tags like `v0.5.23-cu129`, `0.5.22.post1` or `v0.5.23-rocm700-mi30x`; None for other
/// images, a digest-only reference or a tag without a version.
pub fn from_image(image: &str) -> Option<Release> {
    let reference = image.split('@').next().unwrap_or(image);
    let name_end = reference.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = reference[name_end..].split_once(':')?;
    if !name.to_ascii_lowercase().contains("sglang") {
        return None;
    }
    let tag = tag.strip_prefix('v').unwrap_or(tag);
    let version_end = tag.find(|c: char| c != '.' && !c.is_ascii_alphanumeric()).unwrap_or(tag.len());
    tag[..version_end].parse().ok()
}
