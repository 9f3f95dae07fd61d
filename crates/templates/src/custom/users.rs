//! Users and groups of the image being built (`USER`, `COPY --chown`), looked up in its own
//! `/etc/passwd` and `/etc/group`, as Docker does.

use super::in_root::{InRoot, Owner};

/// Largest passwd/group file read, bytes.
const MAX_DB_BYTES: u64 = 4 * 1024 * 1024;

/// A resolved `user[:group]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub uid: u32,
    pub gid: u32,
    /// Home directory from passwd, when the user has an entry.
    pub home: Option<String>,
    /// True when the user has a passwd entry (supplementary groups can be looked up).
    pub known: bool,
}

impl User {
    /// `(uid, gid)`.
    pub fn owner(&self) -> Owner {
        (self.uid, self.gid)
    }

    /// True for root (uid 0).
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }
}

/// Resolves `spec` (`name`, `uid`, `name:group`, `uid:gid`, ...) against the image at `root`.
/// A numeric user without a group gets gid = its passwd gid, or its uid when it has no entry
/// (Docker's documented rule for `--chown`).
///
/// # Errors
/// A message naming a user or group name the image does not have, or an empty spec.
pub fn resolve(root: &InRoot, spec: &str) -> Result<User, String> {
    let (user, group) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    if user.is_empty() || group == Some("") {
        return Err(format!("invalid user {spec:?}"));
    }
    let passwd = read_db(root, "/etc/passwd");
    let entry = passwd.iter().find(|e| {
        if let Ok(n) = user.parse::<u32>() {
            e.get(2).and_then(|u| u.parse::<u32>().ok()) == Some(n)
        } else {
            e.first().map(String::as_str) == Some(user)
        }
    });
    let uid = match (user.parse::<u32>(), entry) {
        (Ok(n), _) => n,
        (Err(_), Some(e)) => {
            field_u32(e, 2).ok_or_else(|| format!("bad passwd entry for {user}"))?
        }
        (Err(_), None) => return Err(format!("no user {user} in the image's /etc/passwd")),
    };
    let gid = match group {
        Some(g) => match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => read_db(root, "/etc/group")
                .iter()
                .find(|e| e.first().map(String::as_str) == Some(g))
                .and_then(|e| field_u32(e, 2))
                .ok_or_else(|| format!("no group {g} in the image's /etc/group"))?,
        },
        None => entry.and_then(|e| field_u32(e, 3)).unwrap_or(uid),
    };
    Ok(User {
        uid,
        gid,
        home: entry
            .and_then(|e| e.get(5).cloned())
            .filter(|h| !h.is_empty()),
        known: entry.is_some(),
    })
}

fn field_u32(entry: &[String], i: usize) -> Option<u32> {
    entry.get(i).and_then(|v| v.parse().ok())
}

/// The colon-separated lines of a passwd-format file; empty when missing or unreadable.
fn read_db(root: &InRoot, path: &str) -> Vec<Vec<String>> {
    let Ok(Some(bytes)) = root.read(path, MAX_DB_BYTES) else {
        return Vec::new();
    };
    String::from_utf8_lossy(&bytes)
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .map(|l| l.split(':').map(str::to_owned).collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    #[test]
    fn names_numbers_and_groups() {
        let tmp = TempDir::new("users");
        std::fs::create_dir_all(tmp.path().join("etc")).unwrap();
        std::fs::write(
            tmp.path().join("etc/passwd"),
            "root:x:0:0:root:/root:/bin/bash\nbob:x:1000:1001::/home/bob:/bin/sh\n",
        )
        .unwrap();
        std::fs::write(tmp.path().join("etc/group"), "root:x:0:\nstaff:x:50:\n").unwrap();
        let root = InRoot::open(tmp.path()).unwrap();
        let bob = resolve(&root, "bob").unwrap();
        assert_eq!(
            (bob.uid, bob.gid, bob.home.as_deref()),
            (1000, 1001, Some("/home/bob"))
        );
        assert_eq!(resolve(&root, "1000").unwrap().gid, 1001);
        assert_eq!(resolve(&root, "bob:staff").unwrap().owner(), (1000, 50));
        assert_eq!(resolve(&root, "2000").unwrap().owner(), (2000, 2000));
        assert_eq!(resolve(&root, "2000:7").unwrap().owner(), (2000, 7));
        assert!(resolve(&root, "alice").unwrap_err().contains("alice"));
        assert!(resolve(&root, "bob:nogroup")
            .unwrap_err()
            .contains("nogroup"));
        assert!(resolve(&root, "").is_err());
        assert!(resolve(&root, "root").unwrap().is_root());
    }
}
