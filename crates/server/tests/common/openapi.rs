//! The OpenAPI document checked from outside: valid OpenAPI 3.1 (openapi-spec-validator), then a bounded
//! schemathesis run against the live server (no 5xx, every answer's status, content type and body as declared).
//! Both are pinned in the test venv, installed here when missing (scripts/test.sh installs them first).

use std::path::PathBuf;
use std::process::Command;

const SCHEMATHESIS: &str = "schemathesis==4.32.5";
const VALIDATOR: &str = "openapi-spec-validator==0.9.0";

/// The test venv's python with both tools.
fn python() -> PathBuf {
    let py = super::sdk_python();
    let ok = Command::new(&py)
        .args(["-c", "import schemathesis, openapi_spec_validator"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let st = Command::new(&py)
            .args(["-m", "pip", "install", "--quiet", SCHEMATHESIS, VALIDATOR])
            .status()
            .expect("pip install schemathesis");
        assert!(st.success(), "pip install {SCHEMATHESIS} {VALIDATOR} failed");
    }
    py
}

/// Validates `url`'s document and fuzzes every route with `headers` (e.g. `Authorization: Bearer …`).
pub fn check(url: &str, headers: &[String]) {
    let py = python();
    let doc = format!("{url}/api/openapi.json");
    let validate = "import json, sys, urllib.request\n\
                    from openapi_spec_validator import validate\n\
                    validate(json.load(urllib.request.urlopen(sys.argv[1])))";
    let out = Command::new(&py).args(["-c", validate, &doc]).output().expect("openapi-spec-validator");
    assert!(out.status.success(), "{doc} is not valid OpenAPI 3.1:\n{}", String::from_utf8_lossy(&out.stderr));
    let bin = py.parent().unwrap().join("schemathesis");
    // A directory of its own (schemathesis writes its reports under the working directory) and no example
    // database: runs in parallel test threads share nothing. One worker: with two, hypothesis 6.170's source
    // cache raised KeyError inside schemathesis now and then (its threads share it).
    let cwd =
        std::env::temp_dir().join(format!("kvad-schemathesis-{}-{}", std::process::id(), url.replace([':', '/'], "_")));
    std::fs::create_dir_all(&cwd).unwrap();
    let mut cmd = Command::new(bin);
    cmd.current_dir(&cwd)
        .args(["run", &doc, "--max-examples", "25", "--workers", "1", "--max-failures", "5"])
        .args(["--generation-database", "none"])
        .args(["--checks", "not_a_server_error,status_code_conformance,content_type_conformance"])
        .args(["--checks", "response_schema_conformance"])
        .env("NO_COLOR", "1");
    for h in headers {
        cmd.args(["-H", h]);
    }
    let out = cmd.output().expect("schemathesis");
    let _ = std::fs::remove_dir_all(&cwd);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "schemathesis against {doc} failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Exit 0 is no failed check; the summary shows cases ran.
    assert!(text.contains(" generated, ") && text.contains(" passed"), "{text}");
}
