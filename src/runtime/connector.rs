//! The SGLang connector (`python/kvpilot_sglang`), embedded in the binary so that an init
//! container of the distroless image can write it where SGLang imports it from:
//! `kvpilot install-connector /opt/kvpilot-py`.

use std::io;
use std::path::{Path, PathBuf};

/// The package's files: path under the destination directory, contents.
pub const FILES: [(&str, &str); 3] = [
    ("kvpilot_sglang/__init__.py", include_str!("../../python/kvpilot_sglang/__init__.py")),
    ("kvpilot_sglang/hicache.py", include_str!("../../python/kvpilot_sglang/hicache.py")),
    ("kvpilot_sglang/wire.py", include_str!("../../python/kvpilot_sglang/wire.py")),
];

/// Writes the package under `dest` (created if missing), replacing older copies; returns the
/// paths written.
pub fn install(dest: &Path) -> io::Result<Vec<PathBuf>> {
    let mut written = Vec::with_capacity(FILES.len());
    for (relative, contents) in FILES {
        let path = dest.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, contents)?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The embedded copy is the repository's: every file of python/kvpilot_sglang is embedded,
    /// byte for byte.
    #[test]
    fn embedded_files_match_the_repository() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
        let mut on_disk: Vec<String> = std::fs::read_dir(root.join("kvpilot_sglang"))
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .filter(|name| name.ends_with(".py"))
            .map(|name| format!("kvpilot_sglang/{name}"))
            .collect();
        on_disk.sort();
        let mut embedded: Vec<String> = FILES.iter().map(|(path, _)| (*path).to_string()).collect();
        embedded.sort();
        assert_eq!(embedded, on_disk, "add new connector files to FILES");
        for (path, contents) in FILES {
            assert_eq!(std::fs::read_to_string(root.join(path)).unwrap(), contents, "{path} drifted");
        }
    }

    #[test]
    fn install_writes_the_package() {
        let dir = tempfile::tempdir().unwrap();
        let written = install(&dir.path().join("py")).unwrap();
        assert_eq!(written.len(), FILES.len());
        let hicache = std::fs::read_to_string(dir.path().join("py/kvpilot_sglang/hicache.py")).unwrap();
        assert!(hicache.contains("class KvpilotStorage(HiCacheStorage)"));
    }
}
