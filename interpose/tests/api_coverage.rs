//! The runtime API coverage table (`docs/runtime-api-coverage.md`) is generated from
//! `abi/exports.txt`, the implemented entry points and `abi/unsupported.txt`; this test fails
//! when the checked-in table is out of date (`scripts/api-coverage.sh` rewrites it) and when a
//! reason names a device attribute that the interposer does not report as absent.

#[path = "../abi/coverage.rs"]
mod coverage;

use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(p: &str) -> String {
    std::fs::read_to_string(root().join(p)).unwrap_or_else(|e| panic!("{p}: {e}"))
}

#[test]
fn coverage_doc_matches_exports_implementations_and_reasons() {
    let exports = coverage::exports(&read("abi/exports.txt"));
    let reasons = coverage::parse_reasons(&read("abi/unsupported.txt")).unwrap();
    let (implemented, _) = coverage::implemented(&root().join("src"));
    let cov = coverage::coverage(&exports, &implemented, &reasons);
    assert!(cov.unexplained.is_empty(), "stubs without a reason: {:?}", cov.unexplained);
    let want = coverage::render(&cov);
    let doc = root().join("../docs/runtime-api-coverage.md");
    if std::env::var_os("CRUM_BLESS").is_some() {
        std::fs::write(&doc, &want).unwrap();
    }
    let have = std::fs::read_to_string(&doc).unwrap_or_default();
    assert!(
        have == want,
        "docs/runtime-api-coverage.md is out of date: run scripts/api-coverage.sh"
    );
}

#[test]
fn every_attribute_a_reason_names_is_reported_absent() {
    let reasons = coverage::parse_reasons(&read("abi/unsupported.txt")).unwrap();
    let abi = read("src/abi_gen.rs");
    for r in reasons.iter().filter_map(|r| r.attribute.as_ref()) {
        let prefix = format!("pub const {r}: u32 = ");
        let value: u32 = abi
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.trim_end_matches(';').parse().ok())
            .unwrap_or_else(|| panic!("{r} is not a device attribute of abi_gen.rs"));
        assert!(
            crum::api::device::ABSENT_FEATURES.contains(&value),
            "{r} is named as reporting a feature absent, but cudaDeviceGetAttribute does not report it 0"
        );
    }
}

#[test]
fn exact_names_win_over_prefixes_and_longer_prefixes_over_shorter() {
    let reasons = coverage::parse_reasons(
        "unsupported | cudaGraphics* | cudaErrorInvalidResourceHandle | - | a\n\
         unsupported | cudaGraphicsGL* | cudaErrorNotSupported | - | b\n\
         unsupported | cudaGraphicsGLRegisterImage | cudaErrorInvalidValue | - | c\n",
    )
    .unwrap();
    let pick = |n: &str| coverage::reason_for(&reasons, n).map(|r| r.reason.as_str());
    assert_eq!(pick("cudaGraphicsMapResources"), Some("a"));
    assert_eq!(pick("cudaGraphicsGLRegisterBuffer"), Some("b"));
    assert_eq!(pick("cudaGraphicsGLRegisterImage"), Some("c"));
    assert_eq!(pick("cudaMalloc"), None);
}

#[test]
fn malformed_reason_lines_are_refused() {
    assert!(coverage::parse_reasons("stub | cudaX | cudaErrorNotSupported | -\n").is_err());
    assert!(coverage::parse_reasons("maybe | cudaX | cudaErrorNotSupported | - | why\n").is_err());
    assert!(coverage::parse_reasons("stub | cuda*X* | cudaErrorNotSupported | - | why\n").is_err());
    assert!(coverage::parse_reasons("stub | cudaX | 801 | - | why\n").is_err());
}
