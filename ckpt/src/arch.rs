//! x86-64 machine code the checkpoint engine needs and Rust cannot express: saving a
//! resumable point on a thread's stack, jumping back to it in a restored process, creating a
//! raw thread with `clone`, and switching a restorer onto a restored program's stack and TLS.
//!
//! # Safety
//! The routines here manipulate the stack pointer and thread pointer directly. Their
//! contracts (stated on each function) are what the callers in [`crate::threads`],
//! [`crate::agent`] and the restorer rely on:
//! - a point saved by [`crum_call_saved`] stays resumable exactly as long as the frame of
//!   that call is live in memory (it is, in a checkpoint image taken while the called
//!   function runs);
//! - [`crum_resume_at`] is given such a saved stack pointer, in a process whose memory holds
//!   that frame, on a thread whose TLS is the one that made the call.
#![allow(unsafe_code)]

#[cfg(not(target_arch = "x86_64"))]
compile_error!("crum's process checkpoint engine supports x86-64 only");

std::arch::global_asm!(
    // u64 crum_call_saved(u64 (*f)(u64), u64 arg, u64 *rsp_out)
    // Pushes the callee-saved registers, stores the stack pointer in *rsp_out, and calls
    // f(arg). Returns f's result, or — when resumed by crum_resume_at — the value given there.
    ".globl crum_call_saved",
    ".hidden crum_call_saved",
    ".type crum_call_saved,@function",
    "crum_call_saved:",
    "push rbp",
    "push rbx",
    "push r12",
    "push r13",
    "push r14",
    "push r15",
    "sub rsp, 8",
    "mov [rdx], rsp",
    "mov rax, rdi",
    "mov rdi, rsi",
    "call rax",
    "2:",
    "add rsp, 8",
    "pop r15",
    "pop r14",
    "pop r13",
    "pop r12",
    "pop rbx",
    "pop rbp",
    "ret",
    // void crum_resume_at(u64 rsp, u64 value) — never returns: crum_call_saved returns value.
    ".globl crum_resume_at",
    ".hidden crum_resume_at",
    ".type crum_resume_at,@function",
    "crum_resume_at:",
    "mov rsp, rdi",
    "mov rax, rsi",
    "jmp 2b",
    // i64 crum_clone_thread(u64 flags, u64 stack_top, u64 ptid, u64 ctid, u64 tls,
    //                       void (*f)(u64), u64 arg)
    // Raw clone(2); the child runs f(arg) on stack_top (16-byte aligned) and exits the thread
    // if f returns. Returns the child's tid or -errno in the parent.
    ".globl crum_clone_thread",
    ".hidden crum_clone_thread",
    ".type crum_clone_thread,@function",
    "crum_clone_thread:",
    "mov rax, [rsp+8]",
    "sub rsi, 16",
    "mov [rsi], r9",
    "mov [rsi+8], rax",
    "mov r10, rcx",
    "mov eax, 56",
    "syscall",
    "test rax, rax",
    "jnz 3f",
    "xor ebp, ebp",
    "pop rax",
    "pop rdi",
    "call rax",
    "xor edi, edi",
    "mov eax, 60",
    "syscall",
    "ud2",
    "3:",
    "ret",
    // void crum_enter(u64 fs_base, u64 stack_top, void (*f)(u64), u64 arg) — never returns.
    // Sets the thread pointer (arch_prctl ARCH_SET_FS), switches to stack_top and calls f(arg).
    ".globl crum_enter",
    ".hidden crum_enter",
    ".type crum_enter,@function",
    "crum_enter:",
    "mov r12, rsi",
    "mov r13, rdx",
    "mov r14, rcx",
    "mov rsi, rdi",
    "mov edi, 0x1002",
    "mov eax, 158",
    "syscall",
    "test rax, rax",
    "jnz 4f",
    "mov rsp, r12",
    "xor ebp, ebp",
    "mov rdi, r14",
    "call r13",
    "4:",
    "ud2",
);

extern "C" {
    /// Calls `f(arg)` after saving the callee-saved registers on the stack and the stack
    /// pointer in `*rsp_out`; returns `f`'s result, or the value passed to
    /// [`crum_resume_at`] when that saved point is resumed.
    pub fn crum_call_saved(f: extern "C" fn(u64) -> u64, arg: u64, rsp_out: *mut u64) -> u64;
    /// Resumes a point saved by [`crum_call_saved`]: that call returns `value`.
    pub fn crum_resume_at(rsp: u64, value: u64) -> !;
    /// Raw `clone(2)` running `f(arg)` on `stack_top` in the child.
    pub fn crum_clone_thread(
        flags: u64,
        stack_top: u64,
        ptid: u64,
        ctid: u64,
        tls: u64,
        f: extern "C" fn(u64),
        arg: u64,
    ) -> i64;
    /// Sets the thread pointer to `fs_base`, switches to `stack_top` and calls `f(arg)`.
    pub fn crum_enter(fs_base: u64, stack_top: u64, f: extern "C" fn(u64), arg: u64) -> !;
}
