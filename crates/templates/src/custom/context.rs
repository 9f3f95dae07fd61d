//! The build context of a Dockerfile build: the files a user uploaded beside the Dockerfile,
//! by their relative paths (contract §2.8: one multipart part per file, named by its path).
//!
//! The bytes live in host files the server chose (numbered, never named after the user's
//! paths), so a context path never becomes a host path.

use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::path::PathBuf;

/// Longest context path accepted, bytes.
pub const MAX_PATH_BYTES: usize = 4096;

/// One uploaded file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextFile {
    /// Normalised relative path: `/`-separated, no `.`/`..`/empty components, no leading `/`.
    pub path: String,
    /// Where the server stored its bytes.
    pub file: PathBuf,
    /// Size in bytes.
    pub size: u64,
    /// Hex sha256 of the bytes (part of the build's cache key).
    pub sha256: String,
}

/// All uploaded files, sorted by path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Context {
    files: Vec<ContextFile>,
}

impl Context {
    /// A context of `files` (sorted here).
    ///
    /// # Errors
    /// A message naming the first path that is also a directory of another file (`a` and
    /// `a/b`), or that appears twice.
    pub fn new(mut files: Vec<ContextFile>) -> Result<Self, String> {
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let mut seen = BTreeSet::new();
        for f in &files {
            if !seen.insert(f.path.as_str()) {
                return Err(format!("context file {} is given twice", f.path));
            }
        }
        for f in &files {
            let dir = format!("{}/", f.path);
            if files.iter().any(|g| g.path.starts_with(&dir)) {
                return Err(format!(
                    "context path {} is both a file and a directory",
                    f.path
                ));
            }
        }
        Ok(Context { files })
    }

    /// The files, sorted by path.
    pub fn files(&self) -> &[ContextFile] {
        &self.files
    }

    /// Total size in bytes.
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// Every directory implied by the file paths (`a`, `a/b` for `a/b/c`), sorted.
    pub fn dirs(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for f in &self.files {
            let mut p = f.path.as_str();
            while let Some((parent, _)) = p.rsplit_once('/') {
                out.insert(parent.to_string());
                p = parent;
            }
        }
        out
    }

    /// Hex sha256 over every (path, content hash) pair: changes when any file is added,
    /// removed, renamed or edited.
    pub fn digest(&self) -> String {
        let mut h = Sha256::new();
        for f in &self.files {
            h.update(format!("{}:{}\n{}\n", f.path.len(), f.path, f.sha256).as_bytes());
        }
        hex::encode(h.finalize())
    }
}

/// Checks and normalises a context path as sent by an SDK (`src/app.py`, `./a`, TS may send
/// any string as the part name).
///
/// # Errors
/// A message saying why: empty, absolute, `..`, NUL or control characters, too long.
pub fn normalize_path(raw: &str) -> Result<String, String> {
    let shown: String = raw.chars().take(80).collect();
    if raw.len() > MAX_PATH_BYTES {
        return Err(format!(
            "context path {shown}... is longer than {MAX_PATH_BYTES} bytes"
        ));
    }
    if raw.chars().any(|c| c == '\0' || c.is_control()) {
        return Err(format!(
            "context path {shown:?} contains control characters"
        ));
    }
    if raw.starts_with('/') {
        return Err(format!("context path {shown} must be relative"));
    }
    let parts: Vec<&str> = raw
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    if parts.contains(&"..") {
        return Err(format!("context path {shown} must not contain '..'"));
    }
    if parts.is_empty() {
        return Err(format!("context path {shown:?} names no file"));
    }
    Ok(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str) -> ContextFile {
        ContextFile {
            path: path.into(),
            file: PathBuf::from("/dev/null"),
            size: 1,
            sha256: "00".into(),
        }
    }

    #[test]
    fn paths_are_normalised_or_refused() {
        assert_eq!(normalize_path("./src//app.py").unwrap(), "src/app.py");
        assert!(normalize_path("../etc/passwd").is_err());
        assert!(normalize_path("a/../../b").is_err());
        assert!(normalize_path("/etc/passwd").is_err());
        assert!(normalize_path("./").is_err());
        assert!(normalize_path("a\nb").is_err());
    }

    #[test]
    fn conflicts_and_dirs() {
        assert!(Context::new(vec![file("a"), file("a/b")]).is_err());
        assert!(Context::new(vec![file("a"), file("a")]).is_err());
        let c = Context::new(vec![file("x/y/z"), file("b")]).unwrap();
        assert_eq!(c.files()[0].path, "b");
        assert_eq!(c.dirs().into_iter().collect::<Vec<_>>(), ["x", "x/y"]);
        assert_eq!(c.total_bytes(), 2);
        let d = Context::new(vec![file("b"), file("x/y/z")]).unwrap();
        assert_eq!(c.digest(), d.digest());
        assert_ne!(c.digest(), Context::new(vec![file("b")]).unwrap().digest());
    }
}
