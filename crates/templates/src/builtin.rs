//! The templates the product ships: `base` and `code-interpreter`.
//!
//! Package lists come from the template spec of the product; every package was
//! checked to exist in Debian bookworm main (`apt-cache policy`).

use crate::recipe::Recipe;

/// Name of the general-purpose template.
pub const BASE: &str = "base";

/// Name of the Jupyter-style code interpreter template.
pub const CODE_INTERPRETER: &str = "code-interpreter";

const BASE_PACKAGES: &[&str] = &[
    "coreutils",
    "bash",
    "python3",
    "python-is-python3",
    "curl",
    "git",
    "ca-certificates",
    "procps",
];

const CODE_INTERPRETER_PACKAGES: &[&str] = &[
    "python3-pip",
    "ipython3",
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
        ]),
        cpu: 1,
        memory_mb: 1024,
    }
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
}
