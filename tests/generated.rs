//! The forwarding in src/ops/ is generated from the pinned burn-backend's trait sources: this
//! fails when it is stale (a new or changed op would otherwise silently take a default body).
use std::process::Command;

#[test]
fn forwarding_is_up_to_date_with_burn_backend() {
    let out = Command::new("python3")
        .args(["scripts/gen_forwarding.py", "--check"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("python3 runs scripts/gen_forwarding.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "src/ops/ is stale: run `python3 scripts/gen_forwarding.py`\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("methods forwarded"), "{stdout}");
}
