//! Who may supply an image (`crum restart` refuses images of other users and images reachable
//! through directories others can write, unless `--trust` names one), rotation that never
//! removes images newer than a restarted program's starting point (lineages), and the clear
//! errors of the CLI (permission errors, a stopped program).
mod proc_common;
use proc_common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn crum(sb: &Sandbox, args: &[&str]) -> Output {
    Command::new(crum_bin())
        .args(args)
        .current_dir(sb.path("run"))
        .env("CRUM_CONTROL_DIR", sb.sock())
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}


fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Copies image `from` to `to` (a planted copy), recursively.
fn copy_image(from: &Path, to: &Path) {
    let st = Command::new("cp").arg("-a").arg(from).arg(to).status().unwrap();
    assert!(st.success());
}

/// Gives `p` (recursively) to another uid; false, with a note, when not root.
fn give_away(p: &Path) -> bool {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("note: not root: cannot give {} to another user; skipping that part", p.display());
        return false;
    }
    let st = Command::new("chown").args(["-R", "4242:4242"]).arg(p).status().unwrap();
    assert!(st.success());
    true
}

/// A program under crum with one image in the sandbox's image directory; the program is
/// killed. Returns the image and the program's output so far.
fn one_image(sb: &Sandbox, prog: &Path) -> (PathBuf, String) {
    let mut p = run_under_crum(sb, prog, &["300", "10"], &[], "run.out");
    p.wait_lines(3);
    let img = checkpoint(sb, p.pid());
    p.kill9();
    (img, p.output())
}

#[test]
fn restart_refuses_a_planted_image_in_a_shared_directory_unless_trusted() {
    let sb = Sandbox::new();
    let prog = build_c("counter");
    let (img, before) = one_image(&sb, &prog);
    // A directory everybody can write (mode 1777), where another user put an image of theirs
    // under a newer name than ours.
    let shared = sb.path("shared");
    std::fs::create_dir(&shared).unwrap();
    copy_image(&img, &shared.join("ckpt-20991231T235959.999Z-1-1"));
    let planted = shared.join("ckpt-29991231T235959.999Z-1-1");
    copy_image(&img, &planted);
    let other_user = give_away(&planted);
    chmod(&shared, 0o1777);

    // The directory of images: anyone could have put the newest image there.
    let o = crum(&sb, &["restart", shared.to_str().unwrap()]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("refusing to restart from") && e.contains("shared is writable by other users"), "{e}");
    assert_eq!(e.lines().count(), 1, "one line: {e}");
    // The planted image named explicitly: not ours.
    if other_user {
        let o = crum(&sb, &["restart", planted.to_str().unwrap()]);
        assert!(!o.status.success());
        let e = stderr(&o);
        assert!(e.contains("is owned by uid 4242, not by you") && e.contains("--trust"), "{e}");
    }
    // Writable by others without the sticky bit: even our own image is refused.
    chmod(&shared, 0o777);
    let ours = shared.join("ckpt-20991231T235959.999Z-1-1");
    let o = crum(&sb, &["restart", ours.to_str().unwrap()]);
    assert!(stderr(&o).contains("shared is writable by other users"), "{}", stderr(&o));
    // --trust is for one image named explicitly, not for a directory of images.
    let o = crum(&sb, &["restart", "--trust", shared.to_str().unwrap()]);
    assert!(stderr(&o).contains("--trust needs an image"), "{}", stderr(&o));
    // Named with --trust it runs (and continues the program).
    let name = if other_user { &planted } else { &ours };
    let mut cmd = Command::new(crum_bin());
    cmd.arg("restart").arg("--trust").arg(name).current_dir(sb.path("run")).env("CRUM_CONTROL_DIR", sb.sock());
    let mut r = spawn_cmd(&mut cmd, sb.path("trusted.out"));
    assert_eq!(r.wait_exit(), 0, "{}", r.stderr());
    let expected = expected_output(&sb, &prog, &["300", "10"]);
    assert_continues(&expected, 0, &before, &r.output(), true, "restart of a trusted image");
    // Our own private directory is accepted as it always was.
    let o = crum(&sb, &["inspect", sb.images().to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn run_and_checkpoint_warn_about_a_world_writable_image_directory() {
    let sb = Sandbox::new();
    let shared = sb.path("shared");
    std::fs::create_dir(&shared).unwrap();
    chmod(&shared, 0o777);
    let o = crum(&sb, &["run", "--device", "emu", "--dir", shared.to_str().unwrap(), "--", "true"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("warning: --dir") && e.contains("writable by other users"), "{e}");
    // A private directory: no warning.
    let o = crum(&sb, &["run", "--device", "emu", "--dir", sb.images().to_str().unwrap(), "--", "true"]);
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
}

#[test]
fn keep_zero_and_uncatchable_checkpoint_signals_are_refused_at_parsing() {
    let sb = Sandbox::new();
    for (args, what) in [
        (&["run", "--keep", "0", "--", "true"][..], "must be at least 1"),
        (&["run", "--on-signal", "KILL", "--", "true"][..], "cannot be caught"),
        (&["run", "--on-signal", "STOP", "--", "true"][..], "cannot be caught"),
        (&["run", "--on-signal", "SEGV", "--", "true"][..], "fault signal"),
    ] {
        let o = crum(&sb, args);
        assert_eq!(o.status.code(), Some(2), "{args:?} is a usage error: {}", stderr(&o));
        assert!(stderr(&o).contains(what), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn an_unreadable_image_is_reported_with_the_permission_error() {
    let sb = Sandbox::new();
    let locked = sb.path("locked");
    std::fs::create_dir_all(locked.join("img")).unwrap();
    let mut cmd = Command::new(crum_bin());
    cmd.arg("restart").arg(locked.join("img"));
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        // Root reads anything: ask as nobody (the sandbox's parent is private to root).
        use std::os::unix::process::CommandExt;
        chmod(sb.tmp.path(), 0o711);
        chmod(&locked, 0o700);
        cmd.uid(65534).gid(65534);
    } else {
        chmod(&locked, 0o000);
    }
    let o = cmd.output().unwrap();
    chmod(&locked, 0o700);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("Permission denied") && !e.contains("does not exist"), "{e}");
    let mut cmd = Command::new(crum_bin());
    cmd.arg("restart").arg(sb.path("nothing/../nothing"));
    let e = stderr(&cmd.output().unwrap());
    assert!(e.contains("does not exist"), "{e}");
}

#[test]
fn checkpoint_of_a_stopped_program_fails_with_a_message() {
    let sb = Sandbox::new();
    let prog = build_c("counter");
    let mut p = run_under_crum(&sb, &prog, &["3000", "10"], &[], "run.out");
    p.wait_lines(3);
    let pid = p.pid().to_string();
    assert!(Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());
    // Bounded, so that a regression fails instead of hanging the suite.
    let o = Command::new("timeout")
        .arg("120")
        .arg(crum_bin())
        .args(["checkpoint", &pid, "--dir"])
        .arg(sb.images())
        .env("CRUM_CONTROL_DIR", sb.sock())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains(&format!("process {pid} is stopped")), "{}", stderr(&o));
    assert!(Command::new("kill").args(["-CONT", &pid]).status().unwrap().success());
    // Continued, it checkpoints as usual, and the path printed is canonical.
    let odd = sb.path("run/../images/./");
    let o = Command::new(crum_bin())
        .args(["checkpoint", &pid, "--dir"])
        .arg(&odd)
        .env("CRUM_CONTROL_DIR", sb.sock())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let printed = String::from_utf8(o.stdout).unwrap();
    let printed = Path::new(printed.trim());
    assert_eq!(printed.parent().unwrap(), sb.images().canonicalize().unwrap());
    p.kill9();
}

/// `crum inspect`'s `lineage` line.
fn lineage_line(sb: &Sandbox, img: &Path) -> String {
    let o = crum(sb, &["inspect", img.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8(o.stdout).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("lineage"))
        .unwrap_or_else(|| panic!("no lineage line: {text}"))
        .trim()
        .to_string()
}

#[test]
fn keep_never_removes_images_newer_than_the_restart_point() {
    let sb = Sandbox::new();
    let prog = build_c("counter");
    // Full images only: which images rotation removes by lineage, not by chain (an
    // incremental image keeps what it needs: proc_incremental.rs).
    let mut p =
        run_under_crum(&sb, &prog, &["3000", "10"], &[("CRUM_CKPT_KEEP", "2"), ("CRUM_CKPT_FULL_EVERY", "1")], "run.out");
    p.wait_lines(2);
    let mut first = Vec::new();
    for _ in 0..3 {
        first.push(checkpoint(&sb, p.pid()));
        p.wait_lines(p.lines() + 1);
    }
    p.kill9();
    // --keep 2: the first image is gone, the second and third are kept.
    assert_eq!(images_in(&sb.images()), first[1..].to_vec());
    let old_lineage = lineage_line(&sb, &first[2]);
    assert_eq!(lineage_line(&sb, &first[1]), old_lineage);

    // Restart the older of the two, which inherits --keep 2, and checkpoint it three times.
    let mut r = restart(&sb, &first[1], "restart.out");
    r.wait_lines(2);
    let mut second = Vec::new();
    for _ in 0..3 {
        second.push(checkpoint(&sb, r.pid()));
        r.wait_lines(r.lines() + 1);
    }
    // A new lineage, child of the first, shown by inspect and ps.
    let new_lineage = lineage_line(&sb, &second[2]);
    let new_id = new_lineage.split_whitespace().next().unwrap().to_string();
    let first_name = first[1].file_name().unwrap().to_str().unwrap();
    assert!(
        new_lineage.contains(&format!("restarted from {first_name} of lineage {old_lineage}")),
        "{new_lineage}"
    );
    let ps = crum(&sb, &["ps"]);
    let ps_out = String::from_utf8(ps.stdout).unwrap();
    let row = ps_out.lines().find(|l| l.split_whitespace().next() == Some(&r.pid().to_string()));
    assert!(row.is_some_and(|l| l.contains(&new_id)), "{ps_out}");
    r.kill9();

    // The third image of the first lineage (newer than the restart point) is still there;
    // rotation removed the restart point and the restarted program's oldest image.
    let left = images_in(&sb.images());
    assert!(left.contains(&first[2]), "the newer image of the first lineage was removed: {left:?}");
    assert_eq!(left, vec![first[2].clone(), second[1].clone(), second[2].clone()]);
    // And it still restarts.
    let expected = expected_output(&sb, &prog, &["3000", "10"]);
    let mut r3 = restart(&sb, &first[2], "restart3.out");
    r3.wait_lines(3);
    r3.kill9();
    assert_continues(&expected, 0, &p.output(), &r3.output(), false, "restart of the kept newer image");
}
