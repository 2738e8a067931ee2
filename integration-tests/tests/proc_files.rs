//! Files: descriptors reopened at their offsets, appended files cut back to their
//! checkpoint size, and restarts refused (naming the file) when a file the program reads
//! changed or vanished.
mod proc_common;
use proc_common::*;

#[test]
fn appended_file_and_read_offsets_match_an_uninterrupted_run() {
    scenario_with("file_append", &["40", "100"], |sb| {
        let want = read(&sb.path("expected/log.txt"));
        let got = read(&sb.path("run/log.txt"));
        assert_eq!(got, want, "log.txt after restart differs from an uninterrupted run's");
    });
}

/// Files the program opens, appends to and closes again at every step (`fopen("a")`,
/// `open(O_APPEND | O_CREAT)`) are rolled back at restart to their size at the checkpoint,
/// and one created after the checkpoint is removed: the program reads them back at every
/// step and fails on a line too many (restart, restart of a restart, and a restart from a
/// checkpoint taken before late.txt existed).
#[test]
fn files_reopened_and_appended_at_every_step_are_rolled_back_at_restart() {
    scenario_with("reopen_append", &["40", "100"], |sb| {
        let steps: String = (0..40).map(|i| format!("step {i}\n")).collect();
        assert_eq!(read(&sb.path("run/steps.log")), steps);
        let late: String = (13..40).map(|i| format!("late {i}\n")).collect();
        assert_eq!(read(&sb.path("run/late.txt")), late);
    });
}

/// Runs file_append under crum, checkpoints it and kills it; returns the image.
fn checkpointed_file_append(sb: &Sandbox) -> std::path::PathBuf {
    let prog = build_c("file_append");
    let mut p = run_under_crum(sb, &prog, &["200", "10"], &[], "run.out");
    p.wait_lines(5);
    let img = checkpoint(sb, p.pid());
    p.kill9();
    img
}

#[test]
fn restart_refuses_when_a_file_read_by_the_program_changed() {
    let sb = Sandbox::new();
    let img = checkpointed_file_append(&sb);
    std::fs::write(sb.path("run/input.txt"), "something else").unwrap();
    let mut r = restart(&sb, &img, "restart.out");
    assert_eq!(r.wait_exit(), 1);
    let err = r.stderr();
    assert!(err.contains("input.txt") && err.contains("changed"), "error does not name the file: {err}");
    assert_eq!(err.lines().count(), 1, "not a one-line error: {err}");
    assert!(r.output().is_empty(), "the program ran: {}", r.output());
}

#[test]
fn restart_refuses_when_a_file_vanished() {
    let sb = Sandbox::new();
    let img = checkpointed_file_append(&sb);
    // Before: restartable.
    let inspect = |img: &std::path::Path| {
        let o = std::process::Command::new(crum_bin()).arg("inspect").arg(img).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let text = inspect(&img);
    assert!(text.contains("restartable yes") && text.contains("input.txt at offset"), "{text}");
    std::fs::remove_file(sb.path("run/input.txt")).unwrap();
    // `crum inspect` says why a restart would fail now, as the restart does.
    let text = inspect(&img);
    assert!(text.contains("restartable no, because file ") && text.contains("input.txt") && text.contains("vanished"), "{text}");
    let mut r = restart(&sb, &img, "restart.out");
    assert_eq!(r.wait_exit(), 1);
    let err = r.stderr();
    assert!(err.contains("input.txt") && err.contains("vanished"), "error does not name the file: {err}");
    assert!(r.output().is_empty());
}

#[test]
fn restart_names_a_socket_it_cannot_restore() {
    let sb = Sandbox::new();
    let prog = build_c("socket_fd");
    let mut p = run_under_crum(&sb, &prog, &["200", "10"], &[], "run.out");
    p.wait_lines(3);
    let img = checkpoint(&sb, p.pid());
    p.kill9();
    let mut r = restart(&sb, &img, "restart.out");
    assert_eq!(r.wait_exit(), 1);
    let err = r.stderr();
    assert!(err.contains("fd ") && err.contains("socket:["), "error does not name the socket: {err}");
    assert!(r.output().is_empty());
    let o = std::process::Command::new(crum_bin()).args(["inspect", "--json"]).arg(&img).output().unwrap();
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["process"]["restartable"], false, "{j}");
    let why = j["process"]["problems"][0].as_str().unwrap();
    assert!(why.contains("netlink socket") && why.contains("cannot be restored"), "{why}");
}

#[test]
fn file_locks_and_an_enlarged_pipe_full_beyond_the_default_come_back() {
    scenario("locks_pipesize", &["40", "100"]);
}

#[test]
fn restart_refuses_naming_the_file_when_another_process_took_the_programs_lock() {
    use std::os::fd::AsRawFd;
    let sb = Sandbox::new();
    let prog = build_c("locks_pipesize");
    let mut p = run_under_crum(&sb, &prog, &["2000", "10"], &[], "run.out");
    p.wait_lines(3);
    let img = checkpoint(&sb, p.pid());
    p.kill9();
    // Someone else has the file's flock by the time of the restart.
    let other = std::fs::File::open(sb.path("run/a.lock")).unwrap();
    // SAFETY: flock on a descriptor we own.
    assert_eq!(unsafe { libc::flock(other.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }, 0);
    let mut r = restart(&sb, &img, "restart.out");
    assert_eq!(r.wait_exit(), 1);
    let err = r.stderr();
    assert!(err.contains("flock") && err.contains("a.lock") && err.contains("another process holds it"), "not named: {err}");
    assert!(r.output().is_empty(), "the program ran: {}", r.output());
    // Given back, the same image restarts.
    drop(other);
    let mut r = restart(&sb, &img, "restart2.out");
    r.wait_lines(2);
    r.kill9();
}

#[test]
fn deleted_files_and_memfds_come_back_with_their_contents() {
    scenario("deleted_files", &["40", "100"]);
}

#[test]
fn a_shared_mapping_of_a_memfd_also_open_as_an_fd_is_refused_at_checkpoint() {
    let sb = Sandbox::new();
    let prog = build_c("memfd_shared");
    let mut p = run_under_crum(&sb, &prog, &["4000", "10"], &[], "run.out");
    p.wait_lines(3);
    // The mapping and a descriptor of the memfd would come back as two copies: no image,
    // with or without --strict.
    for extra in [&[][..], &["--strict"][..]] {
        let c = checkpoint_output_with(&sb, p.pid(), extra);
        let err = String::from_utf8_lossy(&c.stderr);
        assert!(!c.status.success(), "{extra:?}: an image was written: {err}");
        assert!(err.contains("shared mapping") && err.contains("/memfd:crum-shared") && err.contains("separate copies"), "not named: {err}");
    }
    assert_eq!(sb.list_images().len(), 0, "an image was written");
    p.kill9();
}

#[test]
fn files_written_in_place_after_a_checkpoint_are_as_they_were_at_it_after_a_restart() {
    // A file open read-write rewritten record by record, one open write-only rewritten at
    // offset 0, a journal removed and made again: each read back whole at every step.
    scenario("inplace", &["60", "100"]);
}

/// The sqlite3 shell, if installed.
fn sqlite3() -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).map(|d| d.join("sqlite3")).collect::<Vec<_>>())
        .find(|p| p.is_file())
}

#[test]
fn sqlite3_in_rollback_journal_mode_restarts_with_its_database_as_it_was() {
    let Some(sqlite) = sqlite3() else {
        eprintln!("skipped: no sqlite3");
        return;
    };
    // 80 transactions (a row inserted, an earlier row updated in place, a counter), each
    // followed by a slow query printing the totals; at the end an integrity check.
    let mut sql = String::from(
        "PRAGMA journal_mode=DELETE;\nPRAGMA synchronous=FULL;\nCREATE TABLE t(i INTEGER PRIMARY KEY, v BLOB, h TEXT);\n\
         CREATE TABLE c(n INTEGER);\nINSERT INTO c VALUES(0);\n",
    );
    for k in 0..80 {
        sql.push_str(&format!(
            "BEGIN; INSERT INTO t VALUES({k}, randomblob(2000), hex({})); UPDATE t SET h = h || 'x' WHERE i = {}; \
             UPDATE c SET n = n + {k}; COMMIT;\n\
             WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM r WHERE x<150000) \
             SELECT 'step', {k}, (SELECT n FROM c), (SELECT count(*) FROM t), (SELECT sum(length(h)) FROM t), count(*) FROM r;\n",
            k * 7919,
            k / 2
        ));
    }
    sql.push_str("PRAGMA integrity_check;\nSELECT 'done', count(*), sum(length(h)), (SELECT n FROM c) FROM t;\n");
    let script = target_dir().join("crum-c-tests").join("sqlite_rollback.sql");
    std::fs::create_dir_all(script.parent().unwrap()).unwrap();
    if std::fs::read_to_string(&script).ok().as_deref() != Some(sql.as_str()) {
        let tmp = crum_integration_tests::build_tmp(script.parent().unwrap(), "sqlite_rollback.sql");
        std::fs::write(&tmp, &sql).unwrap();
        std::fs::rename(&tmp, &script).unwrap();
    }
    let read = format!(".read {}", script.display());
    // Every step's totals and the integrity check as in an uninterrupted run: a transaction
    // committed after the checkpoint and found in the file after the restart (the database
    // is written in place) would count twice.
    scenario_prog(&sqlite, "sqlite3", &["-bail", "t.db", &read], &[], |_| {});
}

/// Lock owners as the program reads them (its fdinfo, /proc/locks, a child's F_GETLK) name
/// it by the pid it knows after a restart (the restorer took the locks under the kernel's
/// new pid), and a read and a write lease come back; a checkpoint does not break the write
/// lease by opening the file again to read it (it waited 45 s for the stopped program).
#[test]
fn lock_owners_and_leases_are_the_programs_own_after_a_restart() {
    scenario("lock_owners", &["40", "100"]);
}

/// A deleted file and a memfd with holes keep them (SEEK_DATA/SEEK_HOLE find the same
/// extents), their bytes, the memfd's name and seals.
#[test]
fn deleted_files_and_memfds_keep_their_holes_name_and_seals() {
    scenario("sparse_deleted", &["40", "100"]);
}

/// A named pipe whose writer wrote and closed it, read by the program alone: its bytes are
/// carried and read on after a restart.
#[test]
fn a_named_pipe_read_by_the_program_alone_keeps_its_bytes() {
    scenario("fifo_reader", &["40", "100"]);
}

/// State a restart could not bring back exactly refuses the checkpoint (no image, without
/// --strict too), naming it; the program runs on to its end.
#[test]
fn state_a_restart_would_bring_back_wrong_is_refused_at_checkpoint() {
    let mut cases: Vec<(&str, &[&str])> = vec![
        ("aio", &["asynchronous I/O context", "io_setup"]),
        ("private", &["private mapping", "private.tmp (deleted)", "also open at fd 3"]),
        ("memfd", &["/memfd:crum-two", "is open in process", "a copy of its own"]),
        ("clone", &["shares its file descriptor table with its child", "CLONE_FILES"]),
        ("owner", &["sends its I/O signals to process", "F_SETOWN"]),
        ("rseq", &["(refused_state) registered an rseq area other than the C library's"]),
    ];
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        cases.push(("peercred", &["its peer's credentials (SO_PEERCRED: uid 1, gid 1) are not this process's"]));
    }
    let prog = build_c("refused_state");
    for (mode, words) in cases {
        let sb = Sandbox::new();
        let mut p = run_under_crum(&sb, &prog, &[mode, "400", "10"], &[], "run.out");
        p.wait_lines(3);
        let c = checkpoint_output_with(&sb, p.pid(), &[]);
        let err = String::from_utf8_lossy(&c.stderr);
        assert!(!c.status.success(), "{mode}: an image was written: {err}");
        for w in words {
            assert!(err.contains(w), "{mode}: {w:?} not named: {err}");
        }
        assert_eq!(sb.list_images().len(), 0, "{mode}: an image was written");
        assert_eq!(p.wait_exit(), 0, "{mode}: the program did not run on: {}", tail(&p.output()));
        assert!(p.output().ends_with("done\n"), "{mode}: {}", tail(&p.output()));
    }
}
