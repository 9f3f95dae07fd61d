//! The templates the product ships: `base` and `code-interpreter`.
//!
//! Package lists come from the template spec of the product; every package was
//! checked to exist in Debian bookworm main (`apt-cache policy`).

use crate::recipe::{CaCertificate, Recipe};
use std::path::Path;

/// Where Debian hosts keep locally added certificate authorities.
pub const HOST_CA_DIR: &str = "/usr/local/share/ca-certificates";

/// Name of the general-purpose template.
pub const BASE: &str = "base";

/// Name of the Jupyter-style code interpreter template.
pub const CODE_INTERPRETER: &str = "code-interpreter";

/// What every sandbox has: a shell, Python with pip, Node.js with npm (seed 001 runs `npm ci`
/// in `base`), git and curl with Debian's CA bundle, iproute2 and the PostgreSQL client for
/// networked work (issue 7, issue 10).
const BASE_PACKAGES: &[&str] = &[
    "coreutils",
    "bash",
    "python3",
    "python-is-python3",
    "python3-pip",
    "curl",
    "git",
    "ca-certificates",
    "netbase",
    "iproute2",
    "procps",
    "nodejs",
    "npm",
    "postgresql-client",
];

const CODE_INTERPRETER_PACKAGES: &[&str] = &[
    "ipython3",
    "python3-psycopg2",
    "python3-ipykernel",
    "python3-pandas",
    "python3-numpy",
    "python3-matplotlib",
    "python3-plotly",
    "python3-matplotlib-inline",
];

/// The recipe of built-in template `name`, or `None` for any other name.
pub fn builtin(name: &str) -> Option<Recipe> {
    match name {
        BASE => Some(base()),
        CODE_INTERPRETER => Some(code_interpreter()),
        _ => None,
    }
}

/// All built-in recipes, `base` first.
pub fn builtins() -> Vec<Recipe> {
    vec![base(), code_interpreter()]
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn base() -> Recipe {
    Recipe {
        name: BASE.to_owned(),
        description: "Debian bookworm with bash, python3, curl and git".to_owned(),
        packages: strings(BASE_PACKAGES),
        pip_wheels: Vec::new(),
        verify_imports: strings(&["sys"]),
        cpu: 1,
        memory_mb: 512,
        ca_certificates: host_ca_certificates(Path::new(HOST_CA_DIR)),
    }
}

fn code_interpreter() -> Recipe {
    let mut packages = strings(BASE_PACKAGES);
    packages.extend(strings(CODE_INTERPRETER_PACKAGES));
    Recipe {
        name: CODE_INTERPRETER.to_owned(),
        description: "base plus IPython kernel, pandas, numpy, matplotlib, plotly and kaleido"
            .to_owned(),
        packages,
        // kaleido is not packaged in Debian; plotly needs it for static image export.
        pip_wheels: strings(&["kaleido==0.2.1"]),
        verify_imports: strings(&[
            "IPython",
            "ipykernel",
            "pandas",
            "numpy",
            "matplotlib",
            "plotly",
            "kaleido",
            "psycopg2",
        ]),
        cpu: 1,
        memory_mb: 1024,
        ca_certificates: host_ca_certificates(Path::new(HOST_CA_DIR)),
    }
}

/// The `*.crt` files directly under `dir`, by name (none when it does not exist). Names that
/// are not safe file names are left out.
pub fn host_ca_certificates(dir: &Path) -> Vec<CaCertificate> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<CaCertificate> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let pem = std::fs::read_to_string(e.path()).ok()?;
            let ok = name.ends_with(".crt")
                && !name.starts_with('.')
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
            ok.then_some(CaCertificate { name, pem })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_are_valid_and_findable() {
        for r in builtins() {
            r.validate().expect("built-in recipe is valid");
            assert_eq!(builtin(&r.name), Some(r.clone()));
        }
        assert_eq!(builtin("nope"), None);
    }

    #[test]
    fn host_certificate_authorities_are_read_by_name() {
        let dir = std::env::temp_dir().join(format!("pandastack-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("b.crt"), "B").unwrap();
        std::fs::write(dir.join("a.crt"), "A").unwrap();
        std::fs::write(dir.join("notes.txt"), "x").unwrap();
        std::fs::write(dir.join("bad name.crt"), "x").unwrap();
        let cas = host_ca_certificates(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        let names: Vec<&str> = cas.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a.crt", "b.crt"]);
        assert_eq!(cas[0].pem, "A");
        assert!(host_ca_certificates(Path::new("/nonexistent/dir")).is_empty());
    }
}
