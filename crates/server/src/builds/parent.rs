//! `FROM`: which template a Dockerfile build starts from (issue 13): `base`,
//! `code-interpreter`, another template of the same workspace, or `debian:bookworm` /
//! `debian:bookworm-slim` (also `debian:12[-slim]`, with or without `docker.io/library/`),
//! which are `base`. No registry is reachable, so any other image is refused by name.

use super::job::BuildError;
use crate::host::catalog::template_key;
use crate::host::Host;
use pandastack_templates::TemplateInfo;

/// Images that mean the `base` template.
const DEBIAN_ALIASES: &[&str] = &[
    "debian:bookworm",
    "debian:bookworm-slim",
    "debian:12",
    "debian:12-slim",
];

/// The template `image` names for workspace `workspace_id`.
///
/// # Errors
/// A message naming the image and what can be used instead.
pub fn resolve(host: &Host, workspace_id: &str, image: &str) -> Result<TemplateInfo, BuildError> {
    let bare = image
        .strip_prefix("docker.io/library/")
        .or_else(|| image.strip_prefix("library/"))
        .unwrap_or(image);
    let name = if DEBIAN_ALIASES.contains(&bare) {
        "base"
    } else {
        // `base:latest` is `base`; other tags are not versions we keep.
        bare.strip_suffix(":latest").unwrap_or(bare)
    };
    let shown: String = image.chars().take(100).collect();
    if name == "scratch" {
        return Err(BuildError(
            "FROM scratch is not supported: upload a rootfs tar instead (templates.build with rootfs_tar)"
                .into(),
        ));
    }
    match host.find_template(workspace_id, name) {
        Ok(Some(t)) => Ok(t),
        Ok(None) => {
            let own: Vec<String> = host
                .visible_templates(workspace_id)
                .unwrap_or_default()
                .into_iter()
                .map(|t| t.name)
                .collect();
            Err(BuildError(format!(
                "FROM {shown}: unknown base image; this server builds on its own templates \
                 (no registry is reachable): base, code-interpreter, debian:bookworm[-slim] \
                 or one of this workspace's templates ({})",
                own.join(", ")
            )))
        }
        Err(e) => Err(BuildError::internal("looking up the FROM template", e)),
    }
}

/// The parent's identity in a build's cache key: its key and build id (a re-bake or rebuild
/// of the parent changes it).
pub fn identity(parent: &TemplateInfo) -> String {
    format!("{}/{}", template_key(parent), parent.build_id)
}
