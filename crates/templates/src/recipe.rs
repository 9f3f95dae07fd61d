//! What a template is made of, and the hash that names a build of it.
//!
//! The hash covers everything that changes the bytes of the rootfs: the Debian
//! suite, variant, mirror and architecture, the dpkg path filters, the package set (sorted and
//! de-duplicated, so order does not matter), the pinned wheels and how they are
//! fetched, the hook scripts, and [`RECIPE_FORMAT_VERSION`]. It leaves out what
//! only describes the sandbox (cpu, memory, description, verify imports): changing
//! those must not cost a rebuild.

use sha2::{Digest, Sha256};

use crate::error::RecipeError;

/// Bumped whenever the builder changes the rootfs in a way the other hashed
/// inputs do not show (new mmdebstrap flags, a different cleanup), so every
/// cached build is baked again.
pub const RECIPE_FORMAT_VERSION: u32 = 2;

/// Debian release every template is bootstrapped from.
pub const SUITE: &str = "bookworm";

/// mmdebstrap variant: Essential plus apt, nothing else (`--variant=minbase`).
pub const VARIANT: &str = "minbase";

/// mmdebstrap `--mode`: `unshare` run as root (private mount namespace).
pub const MODE: &str = "unshare";

/// Which Debian mirror the bake uses: none is passed, so mmdebstrap takes its default archive
/// and, for a stable suite, adds the matching updates and security suites.
pub const MIRROR: &str = "mmdebstrap-default+updates+security";

/// Debian architecture of the rootfs; it must match the host (no emulation).
pub const ARCH: &str = "amd64";

/// pip `--platform` used when downloading wheels on the host for the chroot.
pub const WHEEL_PLATFORM: &str = "manylinux1_x86_64";

/// pip `--python-version`: the python3 of [`SUITE`] (bookworm ships 3.11).
pub const WHEEL_PYTHON: &str = "3.11";

/// dpkg path filters (`--dpkgopt=path-exclude=` / `path-include=`, in order):
/// documentation, man pages and translations are not needed in a sandbox and
/// are about a quarter of the base rootfs. Licence files stay.
pub const DPKG_PATH_FILTERS: &[&str] = &[
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/locale.alias",
    "path-exclude=/usr/share/lintian/*",
];

/// Customize hook run for every template: mount points, hostname, hosts, cleanup.
pub const FINISH_HOOK: &str = include_str!("hooks/finish.sh");

/// Customize hook that installs the host-downloaded wheels inside the chroot.
pub const WHEELS_HOOK: &str = include_str!("hooks/wheels.sh");

/// How to build one template rootfs, plus the resources a sandbox of it gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recipe {
    /// Template name as clients send it (`base`); lower-case letters, digits, `-`.
    pub name: String,
    /// One line shown to users by the template list.
    pub description: String,
    /// Debian packages installed on top of minbase (`--include`).
    pub packages: Vec<String>,
    /// PyPI wheels pinned as `name==version`, installed without dependencies.
    pub pip_wheels: Vec<String>,
    /// Python modules that must import inside the finished rootfs (verify step).
    pub verify_imports: Vec<String>,
    /// Default vCPUs of a sandbox made from this template.
    pub cpu: u32,
    /// Default memory of a sandbox made from this template, in MiB.
    pub memory_mb: u32,
    /// Certificate authorities the host trusts beyond Debian's bundle (its
    /// `/usr/local/share/ca-certificates`, e.g. a TLS-inspecting egress proxy's),
    /// added to the rootfs so pip, npm, git and curl inside sandboxes trust them too.
    pub ca_certificates: Vec<CaCertificate>,
}

/// One extra trusted CA: a file name (`*.crt`) and its PEM text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaCertificate {
    pub name: String,
    pub pem: String,
}

impl Recipe {
    /// Hex sha256 (64 chars) of the canonical encoding of every input that affects
    /// the rootfs; see the module docs for what is and is not covered.
    pub fn hash(&self) -> String {
        hex::encode(Sha256::digest(self.canonical().as_bytes()))
    }

    /// Line-based, length-prefixed encoding (`key=len:value\n`) so no value can
    /// imitate another field.
    fn canonical(&self) -> String {
        let mut packages = self.packages.clone();
        packages.sort();
        packages.dedup();
        let mut wheels = self.pip_wheels.clone();
        wheels.sort();
        wheels.dedup();

        let mut out = String::new();
        let mut field = |key: &str, value: &str| {
            out.push_str(&format!("{key}={}:{value}\n", value.len()));
        };
        field("format", &RECIPE_FORMAT_VERSION.to_string());
        field("suite", SUITE);
        field("variant", VARIANT);
        field("mode", MODE);
        field("mirror", MIRROR);
        field("arch", ARCH);
        DPKG_PATH_FILTERS.iter().for_each(|f| field("dpkg", f));
        packages.iter().for_each(|p| field("package", p));
        wheels.iter().for_each(|w| field("wheel", w));
        field("wheel-platform", WHEEL_PLATFORM);
        field("wheel-python", WHEEL_PYTHON);
        field("finish-hook", FINISH_HOOK);
        field("wheels-hook", WHEELS_HOOK);
        let mut cas: Vec<&CaCertificate> = self.ca_certificates.iter().collect();
        cas.sort_by(|a, b| a.name.cmp(&b.name));
        for ca in cas {
            field("ca-name", &ca.name);
            field("ca-pem", &ca.pem);
        }
        out
    }

    /// Checks everything that ends up in a path or on a command line.
    ///
    /// # Errors
    /// [`RecipeError`] naming the first bad name, package or wheel, or a wheel
    /// list without `python3-pip` to install it.
    pub fn validate(&self) -> Result<(), RecipeError> {
        validate_name(&self.name)?;
        if let Some(p) = self.packages.iter().find(|p| !is_package_name(p)) {
            return Err(RecipeError::Package(p.clone()));
        }
        if let Some(w) = self.pip_wheels.iter().find(|w| !is_pinned_wheel(w)) {
            return Err(RecipeError::Wheel(w.clone()));
        }
        if !self.pip_wheels.is_empty() && !self.packages.iter().any(|p| p == "python3-pip") {
            return Err(RecipeError::WheelsWithoutPip);
        }
        if let Some(ca) = self
            .ca_certificates
            .iter()
            .find(|c| !is_ca_file_name(&c.name))
        {
            return Err(RecipeError::CaCertificate(ca.name.clone()));
        }
        Ok(())
    }
}

/// Template names become directory names: 1-63 chars of `[a-z0-9-]`, starting
/// with a letter or digit.
///
/// # Errors
/// [`RecipeError::Name`] when the name does not follow that rule.
pub fn validate_name(name: &str) -> Result<(), RecipeError> {
    let ok = (1..=63).contains(&name.len())
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(RecipeError::Name(name.to_owned()))
    }
}

/// Debian policy 5.6.1: lower-case alphanumerics and `+ - .`, starting alphanumeric.
fn is_package_name(p: &str) -> bool {
    p.len() >= 2
        && p.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && p.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+-.".contains(&b))
}

/// `NAME.crt` with NAME from `[A-Za-z0-9._-]`, not hidden (update-ca-certificates reads
/// `*.crt`).
fn is_ca_file_name(n: &str) -> bool {
    n.len() > 4
        && n.ends_with(".crt")
        && !n.starts_with('.')
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// `name==version`, both from `[A-Za-z0-9._-]` (no extras, URLs or ranges).
fn is_pinned_wheel(w: &str) -> bool {
    let part = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    };
    matches!(w.split_once("=="), Some((n, v)) if part(n) && part(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::builtin;

    fn base() -> Recipe {
        builtin("base").expect("base is built in")
    }

    #[test]
    fn hash_is_stable_hex_sha256() {
        let h = base().hash();
        assert_eq!(h, base().hash());
        assert_eq!(h.len(), 64);
        assert!(h.bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn hash_ignores_package_order_and_duplicates() {
        let mut r = base();
        let h = r.hash();
        r.packages.reverse();
        assert_eq!(r.hash(), h);
        r.packages.push(r.packages[0].clone());
        assert_eq!(r.hash(), h);
    }

    #[test]
    fn hash_changes_with_packages_and_wheels() {
        let h = base().hash();
        let mut r = base();
        r.packages.push("jq".into());
        assert_ne!(r.hash(), h);
        let mut r = base();
        r.packages[0] = "coreutils-x".into();
        assert_ne!(r.hash(), h);
        let mut r = base();
        r.pip_wheels.push("kaleido==0.2.1".into());
        assert_ne!(r.hash(), h);
    }

    #[test]
    fn hash_ignores_resources_and_description() {
        let h = base().hash();
        let mut r = base();
        r.cpu = 8;
        r.memory_mb = 4096;
        r.description = "other".into();
        r.verify_imports.push("json".into());
        assert_eq!(r.hash(), h);
    }

    #[test]
    fn hash_covers_extra_certificate_authorities() {
        let mut r = base();
        r.ca_certificates.clear();
        let h = r.hash();
        r.ca_certificates.push(CaCertificate {
            name: "proxy.crt".into(),
            pem: "-----BEGIN CERTIFICATE-----".into(),
        });
        assert_ne!(r.hash(), h);
        assert!(r.validate().is_ok());
        r.ca_certificates[0].name = "../x.crt".into();
        assert!(matches!(r.validate(), Err(RecipeError::CaCertificate(_))));
    }

    #[test]
    fn builtins_differ() {
        let ci = builtin("code-interpreter").expect("built in");
        assert_ne!(ci.hash(), base().hash());
    }

    #[test]
    fn validate_rejects_path_and_flag_injection() {
        assert!(validate_name("../etc").is_err());
        assert!(validate_name("-rf").is_err());
        assert!(validate_name("").is_err());
        assert!(validate_name("code-interpreter").is_ok());
        let mut r = base();
        r.packages.push("bash,evil".into());
        assert_eq!(r.validate(), Err(RecipeError::Package("bash,evil".into())));
        let mut r = base();
        r.pip_wheels.push("kaleido>=0.2".into());
        assert!(matches!(r.validate(), Err(RecipeError::Wheel(_))));
        let mut r = base();
        r.packages.retain(|p| p != "python3-pip");
        r.pip_wheels.push("kaleido==0.2.1".into());
        assert_eq!(r.validate(), Err(RecipeError::WheelsWithoutPip));
    }
}
