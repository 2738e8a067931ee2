//! Separate compilation (`nvcc -rdc=true`): several relocatable PTX modules linked into one
//! program by `Module::link` — extern functions and variables resolved to the module that
//! defines them, private names kept apart, weak definitions giving way, two strong
//! definitions and unresolved names reported by name; and the objects of a real nvcc
//! `-rdc=true` build linked and run against a CPU reference.

mod common;

use common::*;
use crum_ptx::{fatbin, launch, HostMemory, LaunchError, Module, Pool};
use object::{Object, ObjectSection};

const HEAD: &str = ".version 8.0\n.target sm_80\n.address_size 64\n";

/// Defines `scale` (tid * g_scale + tag), `g_scale` and a private `tag` (1).
const DEFS: &str = r#"
.visible .global .align 4 .u32 g_scale = 3;
.global .align 4 .u32 tag = 1;
.visible .func (.param .b32 r) scale(.param .b32 x)
{
  .reg .b32 %r<5>;
  ld.param.u32 %r1, [x];
  ld.global.u32 %r2, [g_scale];
  ld.global.u32 %r3, [tag];
  mad.lo.s32 %r4, %r1, %r2, %r3;
  st.param.b32 [r], %r4;
  ret;
}
.visible .entry k_defs(.param .u64 out)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  ld.global.u32 %r2, [tag];
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r2;
  ret;
}
"#;

/// Uses `scale` and `g_scale` from [`DEFS`] and has its own private `tag` (1000):
/// out[tid] = scale(tid) + g_scale + tag.
const USES: &str = r#"
.extern .func (.param .b32 r) scale(.param .b32 x);
.extern .global .align 4 .u32 g_scale;
.global .align 4 .u32 tag = 1000;
.visible .entry k_uses(.param .u64 out)
{
  .reg .b32 %r<8>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  {
  .param .b32 a0;
  st.param.b32 [a0], %r1;
  .param .b32 r0;
  call.uni (r0), scale, (a0);
  ld.param.b32 %r2, [r0];
  }
  ld.global.u32 %r3, [g_scale];
  ld.global.u32 %r4, [tag];
  add.s32 %r5, %r2, %r3;
  add.s32 %r6, %r5, %r4;
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r6;
  ret;
}
"#;

fn text(body: &str) -> String {
    format!("{HEAD}{body}")
}

/// Runs `kernel` on 32 threads with its module variables allocated by name; returns out[].
fn run32(m: &Module, kernel: &str) -> Result<Vec<i32>, LaunchError> {
    let mut mem = HostMemory::new();
    let out = mem.alloc(32 * 4);
    let syms: Vec<(String, u64)> = m.globals().iter().map(|g| (g.name.clone(), mem.alloc_bytes(&g.init))).collect();
    let lookup = |s: &str| syms.iter().find(|(n, _)| n == s).map(|x| x.1);
    launch(m, kernel, &cfg(1, 32), &out.to_le_bytes(), &lookup, &mem, &Pool::new(1))?;
    Ok(to_i32s(&mem.read(out, 32 * 4)))
}

#[test]
fn extern_function_and_variable_resolve_to_the_module_that_defines_them() {
    // The declaring module first: resolution must not depend on the order.
    for order in [[USES, DEFS], [DEFS, USES]] {
        let texts = order.map(text);
        let m = Module::link(&[&texts[0], &texts[1]]).unwrap();
        assert!(m.unresolved().is_empty(), "{:?}", m.unresolved());
        let got = run32(&m, "k_uses").unwrap();
        let want: Vec<i32> = (0..32).map(|t| (t * 3 + 1) + 3 + 1000).collect();
        assert_eq!(got, want);
        // The defining module's own kernel sees its own private `tag`.
        assert_eq!(run32(&m, "k_defs").unwrap(), vec![1; 32]);
    }
}

#[test]
fn private_variables_of_the_same_name_stay_apart_and_shared_ones_are_allocated_once() {
    let (a, b) = (text(DEFS), text(USES));
    let m = Module::link(&[&a, &b]).unwrap();
    let mut names: Vec<&str> = m.globals().iter().map(|g| g.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["g_scale", "tag", "tag@2"]);
}

#[test]
fn a_private_name_moves_aside_for_a_shared_one_of_a_later_module() {
    let a = text(".global .align 4 .u32 x = 5;\n.visible .entry ka(.param .u64 o) { .reg .b32 %r1; .reg .b64 %rd1; ld.param.u64 %rd1, [o]; ld.global.u32 %r1, [x]; st.global.u32 [%rd1], %r1; ret; }");
    let b = text(".visible .global .align 4 .u32 x = 9;\n.visible .entry kb(.param .u64 o) { .reg .b32 %r1; .reg .b64 %rd1; ld.param.u64 %rd1, [o]; ld.global.u32 %r1, [x]; st.global.u32 [%rd1], %r1; ret; }");
    let m = Module::link(&[&a, &b]).unwrap();
    let mut names: Vec<&str> = m.globals().iter().map(|g| g.name.as_str()).collect();
    names.sort_unstable();
    // The host finds the shared one by its own name.
    assert_eq!(names, ["x", "x@1"]);
    assert_eq!(run32(&m, "ka").unwrap()[0], 5);
    assert_eq!(run32(&m, "kb").unwrap()[0], 9);
}

#[test]
fn a_weak_definition_gives_way_to_a_visible_one() {
    let weak = text(
        ".weak .func (.param .b32 r) f() { .reg .b32 %r1; mov.u32 %r1, 1; st.param.b32 [r], %r1; ret; }\n\
         .weak .global .align 4 .u32 w = 10;\n",
    );
    let strong = text(
        ".visible .func (.param .b32 r) f() { .reg .b32 %r1; mov.u32 %r1, 2; st.param.b32 [r], %r1; ret; }\n\
         .visible .global .align 4 .u32 w = 20;\n\
         .visible .entry k(.param .u64 o) { .reg .b32 %r<3>; .reg .b64 %rd1; ld.param.u64 %rd1, [o];\n\
           { .param .b32 r0; call.uni (r0), f, (); ld.param.b32 %r1, [r0]; }\n\
           ld.global.u32 %r2, [w]; add.s32 %r1, %r1, %r2; st.global.u32 [%rd1], %r1; ret; }",
    );
    for order in [[&weak, &strong], [&strong, &weak]] {
        let m = Module::link(&[order[0], order[1]]).unwrap();
        assert_eq!(m.globals().len(), 1);
        assert_eq!(run32(&m, "k").unwrap()[0], 22, "the visible function and variable win");
    }
}

#[test]
fn two_visible_definitions_of_one_name_fail_naming_both_modules() {
    let a = text(".visible .global .align 4 .u32 dup = 1;");
    let b = text(".visible .entry k() { ret; }");
    let c = text(".visible .global .align 4 .u32 dup = 2;");
    let e = Module::link(&[&a, &b, &c]).unwrap_err();
    assert!(
        e.msg.contains("`dup`") && e.msg.contains("PTX module 1") && e.msg.contains("PTX module 3"),
        "{e}"
    );
}

#[test]
fn an_unresolved_extern_function_refuses_only_the_kernels_that_call_it_naming_it() {
    let a = text(USES);
    // `scale` and `g_scale` are defined nowhere.
    let other = text(".visible .entry fine(.param .u64 o) { .reg .b32 %r1; .reg .b64 %rd1; ld.param.u64 %rd1, [o]; mov.u32 %r1, 42; st.global.u32 [%rd1], %r1; ret; }");
    let m = Module::link(&[&a, &other]).unwrap();
    assert_eq!(m.unresolved(), ["scale", "g_scale"]);
    let e = run32(&m, "k_uses").unwrap_err();
    assert!(
        matches!(&e, LaunchError::Unsupported(s) if s.contains("unresolved extern") && (s.contains("`scale`") || s.contains("`g_scale`"))),
        "{e:?}"
    );
    assert_eq!(run32(&m, "fine").unwrap()[0], 42);
}

#[test]
fn an_unresolved_extern_variable_is_named_when_a_kernel_uses_it() {
    let a = text(
        ".extern .global .align 4 .u32 nowhere;\n\
         .visible .entry k(.param .u64 o) { .reg .b32 %r1; .reg .b64 %rd1; ld.param.u64 %rd1, [o]; ld.global.u32 %r1, [nowhere]; st.global.u32 [%rd1], %r1; ret; }",
    );
    let b = text(".visible .entry k2() { ret; }");
    let m = Module::link(&[&a, &b]).unwrap();
    assert_eq!(m.unresolved(), ["nowhere"]);
    let e = run32(&m, "k").unwrap_err();
    assert!(matches!(&e, LaunchError::Unsupported(s) if s.contains("unresolved extern variable `nowhere`")), "{e:?}");
}

#[test]
fn a_parse_error_in_one_of_several_modules_says_which() {
    let a = text(DEFS);
    let b = text(".bogus_directive 1;");
    let e = Module::link(&[&a, &b]).unwrap_err();
    assert!(e.msg.contains("PTX module 2 of 2") && e.msg.contains("bogus_directive"), "{e}");
}

/// The fat binary of a relocatable object (`nvcc -rdc=true -c`): section `__nv_relfatbin`.
fn relfatbin(name: &str) -> Vec<u8> {
    let obj = compile(name, &["-arch=sm_80", "-rdc=true"], false);
    let data = std::fs::read(&obj).unwrap();
    let file = object::File::parse(&*data).unwrap();
    file.section_by_name("__nv_relfatbin").expect("an -rdc object has __nv_relfatbin").data().unwrap().to_vec()
}

#[test]
fn the_objects_of_an_nvcc_rdc_build_link_and_run_like_the_cpu_reference() {
    // As the interposer hands them over: fat binaries back to back, one per object.
    let mut image = relfatbin("rdc/lib");
    image.extend(relfatbin("rdc/main"));
    let ptx = fatbin::program_ptx(&image).unwrap();
    assert_eq!(ptx.len(), 2, "one PTX per object");
    let texts: Vec<&str> = ptx.iter().map(|p| p.ptx.as_str()).collect();
    let m = Module::link(&texts).unwrap_or_else(|e| panic!("link: {e}"));
    assert!(m.unresolved().is_empty(), "{:?}", m.unresolved());
    let find = |part: &str| m.kernels().map(|k| k.name.clone()).find(|n| n.contains(part)).unwrap();
    let (k_lib, k_main) = (find("k_lib"), find("k_main"));

    let mut mem = HostMemory::new();
    let n = 40usize;
    let out = mem.alloc(n as u64 * 4);
    let syms: Vec<(String, u64)> = m.globals().iter().map(|g| (g.name.clone(), mem.alloc_bytes(&g.init))).collect();
    let lookup = |s: &str| syms.iter().find(|(name, _)| name == s).map(|x| x.1);
    // The host writes object 1's `g_scale` (cudaMemcpyToSymbol from object 2 in a program).
    mem.write(lookup("g_scale").expect("g_scale allocated under its own name"), &5i32.to_le_bytes());
    let args = Args::new().ptr(out).i32(n as i32);
    let scale = |x: i32| (x + 100) * 5 + [10, 20, 30, 40][(x & 3) as usize];

    let o = launch(&m, &k_main, &cfg(2, 32), &args.0, &lookup, &mem, &Pool::new(2)).unwrap();
    let want: Vec<i32> = (0..n as i32).map(|i| scale(i) + (5 - 7)).collect();
    assert_eq!(to_i32s(&mem.read(out, n * 4)), want);
    // Both objects' `$str` format strings print their own text.
    let text = String::from_utf8_lossy(&o.printf).into_owned();
    assert!(text.contains("main 5") && text.contains("lib scale 0"), "{text}");

    launch(&m, &k_lib, &cfg(2, 32), &args.0, &lookup, &mem, &Pool::new(2)).unwrap();
    let want: Vec<i32> = (0..n as i32).map(scale).collect();
    assert_eq!(to_i32s(&mem.read(out, n * 4)), want);
}
