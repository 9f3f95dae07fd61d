//! The state a Dockerfile build carries from step to step: environment (`ENV`), build
//! arguments (`ARG`), working directory (`WORKDIR`) and user (`USER`), and how a `RUN` becomes
//! the command line the build sandbox's guest runs.
//!
//! `ENV` wins over an `ARG` of the same name (Docker's rule); both are in the environment of
//! every later `RUN`; only `ENV` (and `WORKDIR`) survive into the template
//! ([`BuildState::runtime`]). Variables of the parent template are where the build starts.

use super::dockerfile::{Command, CopyArgs};
use super::users::User;
use super::words;
use pandastack_guest_protocol::{TemplateRuntime, DEFAULT_ENV};
use std::collections::BTreeMap;

/// Variables, arguments, directory and user at one point of a build.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BuildState {
    env: BTreeMap<String, String>,
    args: BTreeMap<String, String>,
    global_args: BTreeMap<String, String>,
    workdir: Option<String>,
    user: Option<String>,
}

impl BuildState {
    /// The state at `FROM`: the parent template's runtime defaults.
    pub fn new(parent: &TemplateRuntime) -> Self {
        BuildState {
            env: parent.env.clone(),
            workdir: parent.workdir.clone(),
            ..Default::default()
        }
    }

    /// A variable for substitution: `ENV`, then `ARG`, then the sandbox defaults (`PATH`,
    /// `HOME`, ... that every process gets).
    fn lookup(&self, name: &str) -> Option<String> {
        self.env
            .get(name)
            .or_else(|| self.args.get(name))
            .cloned()
            .or_else(|| {
                DEFAULT_ENV
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| (*v).to_string())
            })
    }

    /// An `ARG` before `FROM`: only `FROM` and later bare `ARG name` lines can use it.
    ///
    /// # Errors
    /// A message for bad syntax or a bad name.
    pub fn global_arg(&mut self, raw: &str) -> Result<(), String> {
        let globals = self.global_args.clone();
        for (name, value) in arg_pairs(raw, &|k| globals.get(k).cloned())? {
            self.global_args.insert(name, value.unwrap_or_default());
        }
        Ok(())
    }

    /// The image of `FROM`, substituted with the global arguments.
    ///
    /// # Errors
    /// A message for bad syntax or an image that substitutes to nothing.
    pub fn from_image(&self, raw: &str) -> Result<String, String> {
        let image = words::single(raw, &|k| self.global_args.get(k).cloned())?;
        if image.is_empty() {
            return Err(format!("FROM {raw}: the image is empty"));
        }
        Ok(image)
    }

    /// Applies `ENV`; returns the variables it set.
    ///
    /// # Errors
    /// A message for bad syntax or a bad variable name.
    pub fn env(&mut self, raw: &str) -> Result<Vec<(String, String)>, String> {
        let lookup = |k: &str| self.lookup(k);
        let words = words::split(raw, &lookup)?;
        let pairs: Vec<(String, String)> = if words.first().is_some_and(|w| !w.contains('=')) {
            // Legacy form `ENV NAME value with spaces`.
            let (name, value) = raw
                .trim()
                .split_once(char::is_whitespace)
                .ok_or_else(|| format!("ENV {}: expected NAME=value", raw.trim()))?;
            vec![(name.to_string(), words::single(value, &lookup)?)]
        } else {
            words
                .into_iter()
                .map(|w| match w.split_once('=') {
                    Some((k, v)) => Ok((k.to_string(), v.to_string())),
                    None => Err(format!("ENV {w}: expected NAME=value")),
                })
                .collect::<Result<_, _>>()?
        };
        for (name, _) in &pairs {
            check_name(name)?;
        }
        self.env.extend(pairs.iter().cloned());
        Ok(pairs)
    }

    /// Applies `ARG name[=default] ...`. A bare name takes the value of a global `ARG`, else
    /// stays unset (no `--build-arg` exists in this API).
    ///
    /// # Errors
    /// A message for bad syntax or a bad name.
    pub fn arg(&mut self, raw: &str) -> Result<(), String> {
        let lookup = |k: &str| self.lookup(k);
        let pairs = arg_pairs(raw, &lookup)?;
        for (name, value) in pairs {
            match value.or_else(|| self.global_args.get(&name).cloned()) {
                Some(v) => {
                    self.args.insert(name, v);
                }
                None => {
                    self.args.remove(&name);
                }
            }
        }
        Ok(())
    }

    /// Applies `WORKDIR`; returns the new absolute directory (relative paths are under the
    /// current one).
    ///
    /// # Errors
    /// A message for bad syntax or an empty path.
    pub fn workdir(&mut self, raw: &str) -> Result<String, String> {
        let path = words::single(raw, &|k| self.lookup(k))?;
        if path.is_empty() {
            return Err("WORKDIR needs a path".into());
        }
        let dir = self.absolute(&path);
        self.workdir = Some(dir.clone());
        Ok(dir)
    }

    /// Applies `USER`; returns the substituted `user[:group]`.
    ///
    /// # Errors
    /// A message for bad syntax or an empty user.
    pub fn user(&mut self, raw: &str) -> Result<String, String> {
        let user = words::single(raw, &|k| self.lookup(k))?;
        if user.is_empty() || user.contains(char::is_whitespace) {
            return Err(format!("USER {raw}: expected user[:group]"));
        }
        self.user = Some(user.clone());
        Ok(user)
    }

    /// The current `USER`, if one was set.
    pub fn current_user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The working directory of the next step (`/` when no `WORKDIR` was set).
    pub fn cwd(&self) -> String {
        self.workdir.clone().unwrap_or_else(|| "/".to_string())
    }

    /// Substitutes a `--chown` value.
    ///
    /// # Errors
    /// A message for bad syntax.
    pub fn expand(&self, raw: &str) -> Result<String, String> {
        words::single(raw, &|k| self.lookup(k))
    }

    /// Sources and absolute destination of a `COPY`/`ADD`, substituted.
    ///
    /// # Errors
    /// A message for bad syntax or fewer than two paths.
    pub fn copy_paths(&self, args: &CopyArgs) -> Result<(Vec<String>, String), String> {
        let lookup = |k: &str| self.lookup(k);
        let mut paths = match args {
            CopyArgs::Shell(raw) => words::split(raw, &lookup)?,
            CopyArgs::Json(items) => items
                .iter()
                .map(|i| words::single(i, &lookup))
                .collect::<Result<_, _>>()?,
        };
        let dest = match paths.pop() {
            Some(d) if !paths.is_empty() && !d.is_empty() => d,
            _ => return Err("needs a source and a destination".into()),
        };
        let trailing = dest.ends_with('/');
        let mut abs = self.absolute(&dest);
        if trailing && !abs.ends_with('/') {
            abs.push('/');
        }
        Ok((paths, abs))
    }

    /// The environment of a `RUN`: `ENV`, plus `ARG` values `ENV` does not override.
    pub fn run_env(&self) -> BTreeMap<String, String> {
        let mut env = self.args.clone();
        env.extend(self.env.clone());
        env
    }

    /// What the template keeps: the final `ENV` and `WORKDIR`.
    pub fn runtime(&self) -> TemplateRuntime {
        TemplateRuntime {
            env: self.env.clone(),
            workdir: self.workdir.clone(),
        }
    }

    /// `path` made absolute under the working directory and normalised (`.`, `..`, `//`).
    fn absolute(&self, path: &str) -> String {
        let joined = if path.starts_with('/') {
            path.to_string()
        } else {
            format!("{}/{path}", self.cwd())
        };
        let mut parts: Vec<&str> = Vec::new();
        for c in joined.split('/') {
            match c {
                "" | "." => {}
                ".." => {
                    parts.pop();
                }
                c => parts.push(c),
            }
        }
        format!("/{}", parts.join("/"))
    }
}

/// `name[=value]` words of an `ARG`.
fn arg_pairs(
    raw: &str,
    lookup: words::Lookup<'_>,
) -> Result<Vec<(String, Option<String>)>, String> {
    let mut out = Vec::new();
    for w in words::split(raw, lookup)? {
        let (name, value) = match w.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (w, None),
        };
        check_name(&name)?;
        out.push((name, value));
    }
    Ok(out)
}

fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b == b'_' || b.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(format!("invalid variable name {name:?}"))
    }
}

/// The command line the guest runs for `cmd` (shell form: `/bin/sh -c '...'`, as Docker
/// does; exec form: the words quoted), switched to `user` with `setpriv` when it is not root.
pub fn run_command_line(cmd: &Command, user: Option<&User>) -> String {
    let mut argv: Vec<String> = Vec::new();
    if let Some(u) = user.filter(|u| !u.is_root()) {
        argv.push("setpriv".into());
        argv.push(format!("--reuid={}", u.uid));
        argv.push(format!("--regid={}", u.gid));
        argv.push(if u.known {
            "--init-groups".into()
        } else {
            "--clear-groups".into()
        });
        argv.push("--".into());
    }
    match cmd {
        Command::Shell(line) => {
            argv.extend(["/bin/sh".to_string(), "-c".into(), line.clone()]);
        }
        Command::Exec(words) => argv.extend(words.iter().cloned()),
    }
    argv.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" ")
}

/// POSIX shell quoting: plain words stay as they are, anything else in single quotes.
pub fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-./:=@%+,".contains(&b));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_arg_workdir_flow() {
        let mut parent = TemplateRuntime::default();
        parent.env.insert("FROM_PARENT".into(), "p".into());
        let mut s = BuildState::new(&parent);
        s.arg("VERSION=1.2 FLAG").unwrap();
        s.env("APP_HOME=/opt/app PATH=/opt/app/bin:$PATH V=$VERSION")
            .unwrap();
        s.env("LEGACY hello world").unwrap();
        assert_eq!(s.workdir("$APP_HOME").unwrap(), "/opt/app");
        assert_eq!(s.workdir("sub/../lib").unwrap(), "/opt/app/lib");
        let env = s.run_env();
        assert_eq!(
            env["PATH"],
            "/opt/app/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        );
        assert_eq!(env["V"], "1.2");
        assert_eq!(env["VERSION"], "1.2");
        assert_eq!(env["LEGACY"], "hello world");
        assert_eq!(env["FROM_PARENT"], "p");
        assert!(!env.contains_key("FLAG"));
        let rt = s.runtime();
        assert_eq!(rt.workdir.as_deref(), Some("/opt/app/lib"));
        assert!(
            !rt.env.contains_key("VERSION"),
            "ARG values do not survive the build"
        );
        assert!(s.env("1BAD=x").is_err());
        assert!(s.env("NOEQUALS").is_err());
    }

    #[test]
    fn global_args_feed_from_and_bare_args() {
        let mut s = BuildState::default();
        s.global_arg("BASE=base TAG").unwrap();
        assert_eq!(s.from_image("${BASE}").unwrap(), "base");
        assert!(s.from_image("$TAG").is_err());
        s.arg("BASE").unwrap();
        assert_eq!(s.run_env()["BASE"], "base");
    }

    #[test]
    fn copy_destinations_are_absolute() {
        let mut s = BuildState::default();
        let (src, dest) = s.copy_paths(&CopyArgs::Shell("a b ./".into())).unwrap();
        assert_eq!(
            (src, dest),
            (vec!["a".to_string(), "b".into()], "/".to_string())
        );
        s.workdir("/app").unwrap();
        let (_, dest) = s
            .copy_paths(&CopyArgs::Json(vec!["x".into(), "lib/".into()]))
            .unwrap();
        assert_eq!(dest, "/app/lib/");
        assert!(s.copy_paths(&CopyArgs::Shell("only".into())).is_err());
    }

    #[test]
    fn run_command_lines() {
        let sh = Command::Shell("echo 'hi' && id".into());
        assert_eq!(
            run_command_line(&sh, None),
            r"/bin/sh -c 'echo '\''hi'\'' && id'"
        );
        let bob = User {
            uid: 1000,
            gid: 1000,
            home: None,
            known: true,
        };
        let exec = Command::Exec(vec!["pip".into(), "install".into(), "six==1.16.0".into()]);
        assert_eq!(
            run_command_line(&exec, Some(&bob)),
            "setpriv --reuid=1000 --regid=1000 --init-groups -- pip install six==1.16.0"
        );
        assert_eq!(quote(""), "''");
    }
}
