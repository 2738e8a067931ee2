//! Runtime API coverage, shared by `build.rs` (which generates the stubs and refuses a stub
//! without a reason) and the test that keeps `docs/runtime-api-coverage.md` current
//! (`tests/api_coverage.rs`, rewritten by `scripts/api-coverage.sh`).
//!
//! Inputs: `abi/exports.txt` (every entry point of the 13.x runtime), the names implemented
//! by hand (every `fn NAME(` under `src/`, the form of `extern "C" fn` and of `export!`),
//! and `abi/unsupported.txt` (kind | pattern | error | attribute | reason per line).
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::path::Path;

/// One line of `unsupported.txt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reason {
    /// `unsupported` (documented-unsupported) or `stub` (not implemented yet).
    pub kind: String,
    /// An exact name, or a prefix ending in `*`.
    pub pattern: String,
    /// The `cudaError_t` name the stub returns.
    pub error: String,
    /// The device attribute that reports the feature absent.
    pub attribute: Option<String>,
    pub reason: String,
    pub line: usize,
}

impl Reason {
    fn matches(&self, name: &str) -> bool {
        match self.pattern.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == self.pattern,
        }
    }

    /// Exact names win, then longer prefixes.
    fn rank(&self) -> usize {
        if self.pattern.ends_with('*') {
            self.pattern.len()
        } else {
            usize::MAX
        }
    }
}

/// The entry points listed in `exports.txt`.
pub fn exports(text: &str) -> Vec<String> {
    text.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_string).collect()
}

/// Parse `unsupported.txt`.
pub fn parse_reasons(text: &str) -> Result<Vec<Reason>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = t.splitn(5, '|').map(str::trim).collect();
        let [kind, pattern, error, attribute, reason] = f[..] else {
            return Err(format!("unsupported.txt:{}: expected `kind | pattern | error | attribute | reason`", i + 1));
        };
        if kind != "unsupported" && kind != "stub" {
            return Err(format!("unsupported.txt:{}: kind `{kind}` is neither `unsupported` nor `stub`", i + 1));
        }
        if reason.is_empty() || pattern.is_empty() || !error.starts_with("cudaError") {
            return Err(format!("unsupported.txt:{}: empty pattern or reason, or an error that is not a cudaError name", i + 1));
        }
        if pattern[..pattern.len() - 1].contains('*') {
            return Err(format!("unsupported.txt:{}: `*` only ends a prefix", i + 1));
        }
        out.push(Reason {
            kind: kind.into(),
            pattern: pattern.into(),
            error: error.into(),
            attribute: (attribute != "-").then(|| attribute.to_string()),
            reason: reason.into(),
            line: i + 1,
        });
    }
    Ok(out)
}

/// The entry for `name`, if any.
pub fn reason_for<'a>(reasons: &'a [Reason], name: &str) -> Option<&'a Reason> {
    reasons.iter().filter(|r| r.matches(name)).max_by_key(|r| r.rank())
}

/// Names implemented by hand: every `extern "C" fn NAME(` or line starting `fn NAME(` in the
/// `.rs` files under `src`. Also returns the files read (for `rerun-if-changed`).
pub fn implemented(src: &Path) -> (BTreeSet<String>, Vec<std::path::PathBuf>) {
    let mut names = BTreeSet::new();
    let mut files = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                for line in std::fs::read_to_string(&p).unwrap_or_default().lines() {
                    let t = line.trim_start();
                    let rest = match line.find("extern \"C\" fn ") {
                        Some(i) => &line[i + 14..],
                        None => match t.strip_prefix("fn ") {
                            Some(r) => r,
                            None => continue,
                        },
                    };
                    let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    names.insert(name);
                }
                files.push(p);
            }
        }
    }
    files.sort();
    (names, files)
}

/// `cudaError` name → the constant of `crum_wire::cuda` (from the text of
/// `wire/src/cuda.rs`: `    ERROR_X = N, "cudaErrorY", "...";`).
pub fn error_consts(cuda_rs: &str) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for line in cuda_rs.lines() {
        let t = line.trim();
        let Some((konst, rest)) = t.split_once(" = ") else { continue };
        if !konst.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_') {
            continue;
        }
        if let Some(name) = rest.split('"').nth(1) {
            m.insert(name.to_string(), konst.to_string());
        }
    }
    m
}

/// The coverage of every export: implemented, or the reason entry of its stub.
pub struct Coverage<'a> {
    pub implemented: Vec<&'a str>,
    pub stubs: Vec<(&'a str, &'a Reason)>,
    /// Stubs with no reason entry (the build refuses them).
    pub unexplained: Vec<&'a str>,
    /// Reason entries that match no stub (stale).
    pub unused: Vec<&'a Reason>,
}

pub fn coverage<'a>(exports: &'a [String], implemented: &BTreeSet<String>, reasons: &'a [Reason]) -> Coverage<'a> {
    let mut c = Coverage { implemented: Vec::new(), stubs: Vec::new(), unexplained: Vec::new(), unused: Vec::new() };
    let mut used = BTreeSet::new();
    for name in exports {
        if implemented.contains(name) {
            c.implemented.push(name);
        } else if let Some(r) = reason_for(reasons, name) {
            used.insert(r.line);
            c.stubs.push((name, r));
        } else {
            c.unexplained.push(name);
        }
    }
    c.unused = reasons.iter().filter(|r| !used.contains(&r.line)).collect();
    c
}

/// `docs/runtime-api-coverage.md`.
pub fn render(c: &Coverage<'_>) -> String {
    let unsupported: Vec<_> = c.stubs.iter().filter(|(_, r)| r.kind == "unsupported").collect();
    let stubs: Vec<_> = c.stubs.iter().filter(|(_, r)| r.kind == "stub").collect();
    let total = c.implemented.len() + c.stubs.len() + c.unexplained.len();
    let mut s = String::new();
    let _ = writeln!(s, "# CUDA runtime API coverage\n");
    let _ = writeln!(
        s,
        "Generated by `scripts/api-coverage.sh` from `interpose/abi/exports.txt` (the entry points of the\n\
         13.x runtime), the entry points implemented under `interpose/src` and the reasons in\n\
         `interpose/abi/unsupported.txt`; `cargo test -p crum-interpose --test api_coverage` fails when\n\
         this file is out of date. Do not edit it by hand.\n"
    );
    let _ = writeln!(
        s,
        "An entry point that is not implemented is a generated stub: it returns the error named below\n\
         and logs its name and reason once (`CRUM_LOG=warn`). *Documented-unsupported* entry points\n\
         return the error CUDA documents for a device or system without the feature, and where CUDA\n\
         has a device attribute for the feature, crum's device reports it absent. *Stubs* could be\n\
         implemented with what exists; the reason says what is missing.\n"
    );
    let _ = writeln!(s, "| | entry points |\n|---|---|");
    let _ = writeln!(s, "| implemented | {} |", c.implemented.len());
    let _ = writeln!(s, "| documented-unsupported | {} |", unsupported.len());
    let _ = writeln!(s, "| stub | {} |", stubs.len() + c.unexplained.len());
    let _ = writeln!(s, "| total | {total} |\n");

    let _ = writeln!(s, "## Stubs ({})\n", stubs.len() + c.unexplained.len());
    let _ = writeln!(s, "| entry point | returns | why not yet |\n|---|---|---|");
    for (name, r) in &stubs {
        let _ = writeln!(s, "| `{name}` | `{}` | {} |", r.error, r.reason);
    }
    for name in &c.unexplained {
        let _ = writeln!(s, "| `{name}` | `cudaErrorNotSupported` | (no reason given) |");
    }
    let _ = writeln!(s, "\n## Documented-unsupported ({})\n", unsupported.len());
    let _ = writeln!(s, "| entry point | returns | attribute reporting it absent | why |\n|---|---|---|---|");
    for (name, r) in &unsupported {
        let attr = r.attribute.as_deref().map_or("—".to_string(), |a| format!("`{a}` = 0"));
        let _ = writeln!(s, "| `{name}` | `{}` | {attr} | {} |", r.error, r.reason);
    }
    let _ = writeln!(s, "\n## Implemented ({})\n", c.implemented.len());
    for name in &c.implemented {
        let _ = writeln!(s, "- `{name}`");
    }
    s
}
