//! `COPY` / `ADD` from the build context into the rootfs, done on the host between `RUN` steps
//! (no sandbox runs then) through [`InRoot`], so nothing the image contains can redirect a
//! write outside it.
//!
//! Docker's rules: sources are relative to the context (`/x` and `./x` mean the same), `.` is
//! the whole context, `*`, `?` and `[...]` match within one path component; a directory source
//! copies its contents; the destination is a directory when it ends in `/`, when there are
//! several sources or a directory source, or when it already is one; a relative destination is
//! under `WORKDIR`. Uploaded files carry no permissions (the SDKs send bytes only), so a copied
//! file gets 0755 when it starts with `#!` and 0644 otherwise, unless `--chmod` says; owner
//! root unless `--chown`. `ADD` is `COPY`, except that a local tar archive (plain or gzip) is
//! unpacked into the destination directory (with the rootfs tar rules) and a URL is refused
//! (no network here: download it in a `RUN`).

use super::context::{Context, ContextFile};
use super::in_root::{InRoot, Owner};
use super::rootfs_tar;
use std::fs::File;
use std::io::{self, Read};

/// What one `COPY` wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Copied {
    pub files: usize,
    pub bytes: u64,
}

/// A resolved `COPY`: sources (after substitution), absolute destination, options.
#[derive(Debug, Clone)]
pub struct CopyPlan<'a> {
    pub sources: &'a [String],
    /// Absolute in-image destination as written (a trailing `/` kept).
    pub dest: &'a str,
    pub owner: Option<Owner>,
    pub chmod: Option<u32>,
    /// `ADD`: unpack local archives, refuse URLs.
    pub add: bool,
    /// Bytes this step may write: what is left of the template's `size_mb` (issue 23 finding
    /// 5). Files (and unpacked archives) past it fail the step naming `size_mb`.
    pub max_bytes: u64,
}

/// Entries an archive `ADD` unpacks may have (its bytes are bounded by
/// [`CopyPlan::max_bytes`]).
const ADD_MAX_ENTRIES: u64 = 2_000_000;

enum Source<'c> {
    File(&'c ContextFile),
    /// A directory of the context (`""` = the whole context).
    Dir(String),
}

/// Copies `plan` from `ctx` into `root`.
///
/// # Errors
/// A message naming the source that matched nothing or left the context, or the destination
/// that could not be written.
pub fn copy(root: &InRoot, ctx: &Context, plan: &CopyPlan<'_>) -> Result<Copied, String> {
    let mut sources = Vec::new();
    for raw in plan.sources {
        if plan.add && raw.contains("://") {
            return Err(format!(
                "ADD {raw}: URLs are not supported (download it in a RUN step)"
            ));
        }
        let matched = resolve_source(ctx, raw)?;
        if matched.is_empty() {
            return Err(format!("{raw}: no such file in the build context"));
        }
        sources.extend(matched);
    }
    let dest_is_dir = plan.dest.ends_with('/')
        || sources.len() > 1
        || sources.iter().any(|s| matches!(s, Source::Dir(_)))
        || root.is_dir(plan.dest);
    let dest = plan.dest.trim_end_matches('/');
    let dir_mode = plan.chmod.unwrap_or(0o755);
    let mut copied = Copied::default();
    if dest_is_dir {
        root.mkdir_all(dest, dir_mode, plan.owner)
            .map_err(|e| format!("cannot create {dest}/: {e}"))?;
    }
    for source in sources {
        match source {
            Source::File(f) if plan.add && is_archive(f) => {
                root.mkdir_all(dest, dir_mode, plan.owner)
                    .map_err(|e| format!("cannot create {dest}/: {e}"))?;
                let file =
                    File::open(&f.file).map_err(|e| format!("cannot read {}: {e}", f.path))?;
                let limits = rootfs_tar::Limits {
                    max_bytes: plan.max_bytes.saturating_sub(copied.bytes),
                    max_entries: ADD_MAX_ENTRIES,
                    bytes_rule: "what is left of the template's size_mb",
                };
                let done = rootfs_tar::unpack(file, root, dest, limits, false)
                    .map_err(|e| format!("ADD {}: {e}", f.path))?;
                copied.files += done.entries as usize;
                copied.bytes += done.bytes;
            }
            Source::File(f) => {
                let target = if dest_is_dir {
                    format!("{dest}/{}", basename(&f.path))
                } else {
                    dest.to_string()
                };
                room(&copied, f, plan)?;
                copied.bytes += write_file(root, f, &target, plan)?;
                copied.files += 1;
            }
            Source::Dir(prefix) => {
                let under = |p: &str| -> Option<String> {
                    if prefix.is_empty() {
                        Some(p.to_string())
                    } else {
                        p.strip_prefix(&format!("{prefix}/")).map(str::to_owned)
                    }
                };
                for d in ctx.dirs() {
                    if let Some(rel) = under(&d) {
                        let target = format!("{dest}/{rel}");
                        root.mkdir_all(&target, dir_mode, plan.owner)
                            .map_err(|e| format!("cannot create {target}: {e}"))?;
                    }
                }
                for f in ctx.files() {
                    if let Some(rel) = under(&f.path) {
                        room(&copied, f, plan)?;
                        copied.bytes += write_file(root, f, &format!("{dest}/{rel}"), plan)?;
                        copied.files += 1;
                    }
                }
            }
        }
    }
    Ok(copied)
}

/// Whether `f` still fits in [`CopyPlan::max_bytes`] after what was copied.
fn room(copied: &Copied, f: &ContextFile, plan: &CopyPlan<'_>) -> Result<(), String> {
    if copied.bytes.saturating_add(f.size) <= plan.max_bytes {
        return Ok(());
    }
    Err(format!(
        "{}: the copied files need more than the {} MiB left of the template's size_mb",
        f.path,
        plan.max_bytes / (1024 * 1024)
    ))
}

fn write_file(
    root: &InRoot,
    f: &ContextFile,
    target: &str,
    plan: &CopyPlan<'_>,
) -> Result<u64, String> {
    let fail = |e: io::Error| format!("cannot write {target}: {e}");
    let mut src = File::open(&f.file).map_err(fail)?;
    let mut head = [0u8; 2];
    let n = src.read(&mut head).map_err(fail)?;
    let mode = plan.chmod.unwrap_or(if n == 2 && &head == b"#!" {
        0o755
    } else {
        0o644
    });
    let mut out = root.create_file(target, mode, plan.owner).map_err(fail)?;
    let mut src = File::open(&f.file).map_err(fail)?;
    io::copy(&mut src, &mut out).map_err(fail)
}

/// The context entries a source names.
fn resolve_source<'c>(ctx: &'c Context, raw: &str) -> Result<Vec<Source<'c>>, String> {
    let parts: Vec<&str> = raw
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    if parts.contains(&"..") {
        return Err(format!("{raw}: outside the build context"));
    }
    let pattern = parts.join("/");
    if pattern.is_empty() {
        return Ok(vec![Source::Dir(String::new())]);
    }
    let dirs = ctx.dirs();
    if !has_glob(&pattern) {
        if let Some(f) = ctx.files().iter().find(|f| f.path == pattern) {
            return Ok(vec![Source::File(f)]);
        }
        return Ok(if dirs.contains(&pattern) {
            vec![Source::Dir(pattern)]
        } else {
            Vec::new()
        });
    }
    let mut out: Vec<Source<'c>> = ctx
        .files()
        .iter()
        .filter(|f| glob_match(&pattern, &f.path))
        .map(Source::File)
        .collect();
    out.extend(
        dirs.into_iter()
            .filter(|d| glob_match(&pattern, d))
            .map(Source::Dir),
    );
    Ok(out)
}

/// A tar (`ustar` magic at byte 257) or a gzip stream (Docker unpacks both for `ADD`).
fn is_archive(f: &ContextFile) -> bool {
    let mut head = [0u8; 262];
    let n = File::open(&f.file)
        .and_then(|mut file| {
            let mut read = 0;
            while read < head.len() {
                match file.read(&mut head[read..])? {
                    0 => break,
                    n => read += n,
                }
            }
            Ok(read)
        })
        .unwrap_or(0);
    (n >= 2 && head[..2] == [0x1f, 0x8b]) || (n >= 262 && &head[257..262] == b"ustar")
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn has_glob(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// Go's `filepath.Match` for `/`-separated paths: `*` and `?` never match `/`, `[abc]`,
/// `[a-z]` and `[!x]` / `[^x]` classes, `\` escapes. The pattern must match the whole path.
pub fn glob_match(pattern: &str, path: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let s: Vec<char> = path.chars().collect();
    matches_at(&p, &s)
}

fn matches_at(p: &[char], s: &[char]) -> bool {
    match p.first() {
        None => s.is_empty(),
        Some('*') => (0..=s.len())
            .take_while(|&i| i == 0 || s[i - 1] != '/')
            .any(|i| matches_at(&p[1..], &s[i..])),
        Some('?') => matches!(s.first(), Some(c) if *c != '/') && matches_at(&p[1..], &s[1..]),
        Some('[') => match (class(&p[1..]), s.first()) {
            (Some((hit, len)), Some(&c)) if c != '/' && hit(c) => {
                matches_at(&p[1 + len..], &s[1..])
            }
            _ => false,
        },
        Some('\\') if p.len() > 1 => s.first() == Some(&p[1]) && matches_at(&p[2..], &s[1..]),
        Some(c) => s.first() == Some(c) && matches_at(&p[1..], &s[1..]),
    }
}

type ClassFn = Box<dyn Fn(char) -> bool>;

/// A `[...]` class starting after `[`: its matcher and how many pattern chars it used
/// (including the closing `]`).
fn class(p: &[char]) -> Option<(ClassFn, usize)> {
    let (negate, start) = match p.first() {
        Some('!') | Some('^') => (true, 1),
        _ => (false, 0),
    };
    let end = (start..p.len()).find(|&i| p[i] == ']' && i > start)?;
    let items: Vec<char> = p[start..end].to_vec();
    let hit = move |c: char| {
        let mut i = 0;
        let mut found = false;
        while i < items.len() {
            if i + 2 < items.len() && items[i + 1] == '-' {
                found |= items[i] <= c && c <= items[i + 2];
                i += 3;
            } else {
                found |= items[i] == c;
                i += 1;
            }
        }
        found != negate
    };
    Some((Box::new(hit), end + 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;

    fn context(dir: &Path, files: &[(&str, &str)]) -> Context {
        let store = dir.join("ctx");
        std::fs::create_dir_all(&store).unwrap();
        let entries = files
            .iter()
            .enumerate()
            .map(|(i, (path, body))| {
                let file = store.join(i.to_string());
                std::fs::write(&file, body).unwrap();
                ContextFile {
                    path: path.to_string(),
                    file,
                    size: body.len() as u64,
                    sha256: String::new(),
                }
            })
            .collect();
        Context::new(entries).unwrap()
    }

    fn run(root: &InRoot, ctx: &Context, sources: &[&str], dest: &str) -> Result<Copied, String> {
        let sources: Vec<String> = sources.iter().map(|s| s.to_string()).collect();
        copy(
            root,
            ctx,
            &CopyPlan {
                sources: &sources,
                dest,
                owner: None,
                chmod: None,
                add: false,
                max_bytes: u64::MAX,
            },
        )
    }

    #[test]
    fn docker_destination_rules() {
        let tmp = TempDir::new("copy");
        let rootfs = tmp.path().join("rootfs");
        std::fs::create_dir_all(rootfs.join("existing")).unwrap();
        let ctx = context(
            tmp.path(),
            &[
                ("run.sh", "#!/bin/sh\necho hi\n"),
                ("src/a.py", "print(1)"),
                ("src/lib/b.py", "x"),
            ],
        );
        let root = InRoot::open(&rootfs).unwrap();

        run(&root, &ctx, &["run.sh"], "/app/start").unwrap();
        let m = std::fs::metadata(rootfs.join("app/start")).unwrap();
        assert_eq!(m.mode() & 0o777, 0o755);
        run(&root, &ctx, &["src/a.py"], "/existing").unwrap();
        assert_eq!(
            std::fs::read(rootfs.join("existing/a.py")).unwrap(),
            b"print(1)"
        );
        assert_eq!(
            std::fs::metadata(rootfs.join("existing/a.py"))
                .unwrap()
                .mode()
                & 0o777,
            0o644
        );
        // A directory source copies its contents.
        let c = run(&root, &ctx, &["./src"], "/opt/code").unwrap();
        assert_eq!(c.files, 2);
        assert!(rootfs.join("opt/code/lib/b.py").is_file());
        // The whole context, and globs within one component.
        run(&root, &ctx, &["."], "/all/").unwrap();
        assert!(rootfs.join("all/src/lib/b.py").is_file());
        let c = run(&root, &ctx, &["src/*.py"], "/g/").unwrap();
        assert_eq!(c.files, 1);
        assert!(run(&root, &ctx, &["missing"], "/x")
            .unwrap_err()
            .contains("missing"));
        assert!(run(&root, &ctx, &["../etc/passwd"], "/x")
            .unwrap_err()
            .contains("outside"));
    }

    #[test]
    fn chmod_and_chown_apply() {
        let tmp = TempDir::new("copy-owner");
        let rootfs = tmp.path().join("rootfs");
        std::fs::create_dir_all(&rootfs).unwrap();
        let ctx = context(tmp.path(), &[("a", "x")]);
        let root = InRoot::open(&rootfs).unwrap();
        let sources = vec!["a".to_string()];
        copy(
            &root,
            &ctx,
            &CopyPlan {
                sources: &sources,
                dest: "/d/",
                owner: Some((1000, 1000)),
                chmod: Some(0o600),
                add: false,
                max_bytes: u64::MAX,
            },
        )
        .unwrap();
        let m = std::fs::metadata(rootfs.join("d/a")).unwrap();
        assert_eq!((m.uid(), m.gid(), m.mode() & 0o777), (1000, 1000, 0o600));
    }

    #[test]
    fn add_unpacks_archives_and_refuses_urls() {
        let tmp = TempDir::new("copy-add");
        let rootfs = tmp.path().join("rootfs");
        std::fs::create_dir_all(&rootfs).unwrap();
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_path("pkg/data.txt").unwrap();
        h.set_size(3);
        h.set_mode(0o644);
        h.set_cksum();
        b.append(&h, &b"abc"[..]).unwrap();
        let archive = b.into_inner().unwrap();
        let store = tmp.path().join("ctx");
        std::fs::create_dir_all(&store).unwrap();
        std::fs::write(store.join("0"), &archive).unwrap();
        let ctx = Context::new(vec![ContextFile {
            path: "bundle.tar".into(),
            file: store.join("0"),
            size: archive.len() as u64,
            sha256: String::new(),
        }])
        .unwrap();
        let root = InRoot::open(&rootfs).unwrap();
        let add = |sources: Vec<String>, dest: &str| {
            copy(
                &root,
                &ctx,
                &CopyPlan {
                    sources: &sources,
                    dest,
                    owner: None,
                    chmod: None,
                    add: true,
                    max_bytes: u64::MAX,
                },
            )
        };
        add(vec!["bundle.tar".into()], "/opt").unwrap();
        assert_eq!(
            std::fs::read(rootfs.join("opt/pkg/data.txt")).unwrap(),
            b"abc"
        );
        let e = add(vec!["https://example.com/x.tgz".into()], "/opt").unwrap_err();
        assert!(e.contains("URLs are not supported"), "{e}");
        // issue 23 finding 5: what is left of size_mb bounds ADD and COPY alike.
        for add in [true, false] {
            let sources = vec!["bundle.tar".to_string()];
            let plan = CopyPlan {
                sources: &sources,
                dest: "/small/",
                owner: None,
                chmod: None,
                add,
                max_bytes: 2,
            };
            let e = copy(&root, &ctx, &plan).unwrap_err();
            assert!(e.contains("size_mb"), "{e}");
        }
        // COPY of the same file copies it as it is.
        run(&root, &ctx, &["bundle.tar"], "/copy/").unwrap();
        assert_eq!(
            std::fs::read(rootfs.join("copy/bundle.tar")).unwrap(),
            archive
        );
    }

    #[test]
    fn globs() {
        assert!(glob_match("*.py", "a.py"));
        assert!(!glob_match("*.py", "src/a.py"));
        assert!(glob_match("src/?.py", "src/a.py"));
        assert!(glob_match("[ab]*", "b1"));
        assert!(!glob_match("[!ab]*", "b1"));
        assert!(glob_match("f[0-9]", "f7"));
        assert!(glob_match("a\\*", "a*"));
        assert!(!glob_match("a", "ab"));
    }
}
