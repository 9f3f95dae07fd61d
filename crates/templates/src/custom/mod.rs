//! Templates users build (issue 13): from a Dockerfile (the subset in [`dockerfile`]) on top of
//! one of our templates, or from a rootfs tar ([`rootfs_tar`]).
//!
//! This crate holds the parts that need no sandbox: parsing, the per-step state ([`state`]),
//! `COPY` ([`copy`]), unpacking, the finishing touches ([`finish`]) and the cache key
//! ([`build_hash`]); every file operation on a rootfs goes through [`in_root`]. The server runs
//! the `RUN` steps in build sandboxes and publishes the result through
//! [`TemplateStore::begin_build`](crate::TemplateStore::begin_build), like a bake.
//!
//! A user template lives in its workspace's own store root (names are per workspace) and gets
//! generations like a built-in: an unchanged rebuild is a cache hit, a changed one a new
//! generation, and snapshots of an older generation stop restoring.

pub mod context;
pub mod copy;
pub mod copy_tree;
pub mod dockerfile;
pub mod finish;
pub mod flatten;
pub mod in_root;
pub mod rootfs_tar;
pub mod state;
pub mod users;
pub mod words;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Bumped whenever the builder changes what the same inputs produce (new finishing touches, a
/// different COPY rule), so every cached user build is built again.
pub const CUSTOM_FORMAT_VERSION: u32 = 1;

/// How a template's rootfs was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TemplateKind {
    /// A built-in recipe baked with mmdebstrap.
    #[default]
    Builtin,
    /// A Dockerfile built on top of another template.
    Dockerfile,
    /// A rootfs tar a user uploaded.
    RootfsTar,
}

/// Resources baked into a template: every sandbox of it, and every snapshot or fork of those,
/// gets them (seed 000: "You cannot resize on restore ... Bake the size you need into the
/// template").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    /// vCPUs (CPU quota in whole CPUs).
    pub cpu: u32,
    /// Memory limit, MiB.
    pub memory_mb: u32,
    /// Disk size asked for, MiB (contract §2.8 `size_mb`).
    pub disk_mb: u32,
}

/// What a user build is made from, for its cache key.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    /// A Dockerfile: its text, the digest of its context ([`context::Context::digest`]) and
    /// the parent's identity (`<name>/<build id>`, which changes with every re-bake).
    Dockerfile {
        text: &'a str,
        context_digest: &'a str,
        parent: &'a str,
    },
    /// A rootfs tar: the hex sha256 of the uploaded bytes.
    RootfsTar { sha256: &'a str },
}

/// Hex sha256 (64 chars) naming a user build: the source (parent build, Dockerfile, context,
/// or tar bytes), the resources and [`CUSTOM_FORMAT_VERSION`]. Equal inputs give an equal hash,
/// so an unchanged rebuild is a cache hit; resources are included because a template snapshot
/// is taken at one size.
pub fn build_hash(source: &Source<'_>, resources: &Resources) -> String {
    let mut out = String::new();
    let mut field = |key: &str, value: &str| {
        out.push_str(&format!("{key}={}:{value}\n", value.len()));
    };
    field("custom-format", &CUSTOM_FORMAT_VERSION.to_string());
    match source {
        Source::Dockerfile {
            text,
            context_digest,
            parent,
        } => {
            field("kind", "dockerfile");
            field("parent", parent);
            field("dockerfile", text);
            field("context", context_digest);
        }
        Source::RootfsTar { sha256 } => {
            field("kind", "rootfs-tar");
            field("tar", sha256);
        }
    }
    field("cpu", &resources.cpu.to_string());
    field("memory-mb", &resources.memory_mb.to_string());
    field("disk-mb", &resources.disk_mb.to_string());
    hex::encode(Sha256::digest(out.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const RES: Resources = Resources {
        cpu: 1,
        memory_mb: 512,
        disk_mb: 1024,
    };

    fn df(text: &str, ctx: &str, parent: &str) -> String {
        build_hash(
            &Source::Dockerfile {
                text,
                context_digest: ctx,
                parent,
            },
            &RES,
        )
    }

    #[test]
    fn hash_covers_every_input() {
        let h = df("FROM base", "c", "base/x-g1");
        assert_eq!(h.len(), 64);
        assert_eq!(h, df("FROM base", "c", "base/x-g1"));
        assert_ne!(h, df("FROM base\n", "c", "base/x-g1"));
        assert_ne!(h, df("FROM base", "d", "base/x-g1"));
        assert_ne!(h, df("FROM base", "c", "base/x-g2"));
        let bigger = Resources { cpu: 2, ..RES };
        assert_ne!(
            h,
            build_hash(
                &Source::Dockerfile {
                    text: "FROM base",
                    context_digest: "c",
                    parent: "base/x-g1"
                },
                &bigger
            )
        );
        assert_ne!(h, build_hash(&Source::RootfsTar { sha256: "c" }, &RES));
    }
}
