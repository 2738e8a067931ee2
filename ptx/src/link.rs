//! Separate compilation (`nvcc -rdc=true`): the relocatable PTX of every object of a program
//! decoded as one program, names resolved across modules as nvlink resolves them.
//!
//! - A name declared with linkage (`.visible`, `.extern`, `.weak`, `.common`) is one symbol
//!   for the whole program: an `.extern .func` or `.extern .global` declaration in one module
//!   and the definition in another are the same function or variable.
//! - A name without linkage is private to its module. Several modules may each have one of
//!   the same name (nvcc names every printf format string `$str`): the later private one, or
//!   the private one when a shared name comes later, is renamed `name@N` (N: its module's
//!   1-based number; `@` cannot occur in a PTX identifier, so the new name collides with
//!   nothing). nvcc gives the private variables the host registers (`static __device__`)
//!   names unique to their object, so those keep theirs and `cudaMemcpyToSymbol` finds them.
//! - Two `.visible` definitions of one name are an error naming both modules; a `.weak` or
//!   `.common` definition gives way to a `.visible` one, and of several weak ones the first
//!   wins (template instantiations appear in every object that uses them).
//! - A shared name that no module defines is unresolved: the functions that call or name it
//!   are rejected (docs/ptx-engine.md, Decoded form), so a kernel that reaches one is refused
//!   at launch with a message naming the symbol, and the program's other kernels run — as a
//!   program that also uses a device library crum does not have (`cudadevrt`) still runs its
//!   other kernels. [`crate::Module::unresolved`] lists them for the loader to report.

use std::collections::{HashMap, HashSet};

use crate::api::ParseError;

/// The linkage a module-scope declaration was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Linkage {
    /// No linkage directive: private to the module.
    Private,
    Visible,
    Extern,
    Weak,
    Common,
}

impl Linkage {
    /// Whether the name is one symbol for every module.
    pub(crate) fn shared(self) -> bool {
        self != Linkage::Private
    }
    fn weak(self) -> bool {
        matches!(self, Linkage::Weak | Linkage::Common)
    }
}

/// A definition of a shared name: the module that gave it and whether another may replace it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Def {
    pub(crate) module: usize,
    pub(crate) weak: bool,
}

impl Def {
    pub(crate) fn new(module: usize, linkage: Linkage) -> Def {
        Def { module, weak: linkage.weak() }
    }
}

/// What to do with a new definition of a shared name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Take {
    /// The first definition.
    First,
    /// It replaces a weak one.
    Replace,
    /// An earlier definition stays.
    Ignore,
}

/// nvlink's rule for a second definition of `name` (`what`: "function", "variable").
pub(crate) fn take_definition(what: &str, name: &str, prev: Option<Def>, new: Def) -> Result<Take, String> {
    match prev {
        None => Ok(Take::First),
        Some(_) if new.weak => Ok(Take::Ignore),
        Some(p) if p.weak => Ok(Take::Replace),
        Some(p) if p.module == new.module => Err(format!("{what} `{name}` is defined twice in PTX module {}", new.module + 1)),
        Some(p) => Err(format!(
            "{what} `{name}` is defined in PTX module {} and again in PTX module {}",
            p.module + 1,
            new.module + 1
        )),
    }
}

/// The name a private variable of `module` gets when another module's variable has its name.
pub(crate) fn private_name(name: &str, module: usize) -> String {
    format!("{name}@{}", module + 1)
}

/// Functions the engine provides itself: never unresolved.
pub(crate) fn is_builtin(name: &str) -> bool {
    matches!(name, "vprintf" | "__assertfail" | "__assert_fail" | "malloc" | "free" | "cudaGraphSetConditional")
}

/// A parse error of one module of several: says which.
pub(crate) fn in_module(e: ParseError, module: usize, modules: usize) -> ParseError {
    if modules <= 1 {
        return e;
    }
    ParseError { line: e.line, msg: format!("in PTX module {} of {modules}: {}", module + 1, e.msg) }
}

/// Program-wide names: what every module's shared names resolve to.
#[derive(Debug, Default)]
pub(crate) struct LinkTable {
    /// Shared function name → function index.
    pub(crate) funcs: HashMap<String, u32>,
    /// Function index → its definition (shared functions only).
    pub(crate) func_defs: HashMap<u32, Def>,
    /// Shared variable name → symbol index.
    pub(crate) vars: HashMap<String, u32>,
    /// Symbol index → its definition and its index in `Program::globals`.
    pub(crate) var_defs: HashMap<u32, (Def, usize)>,
    /// Symbol index of each private variable → its module.
    pub(crate) private_vars: HashMap<u32, usize>,
    /// Symbol indices of shared variables no module defines (known after the first pass).
    pub(crate) unresolved_vars: HashSet<u32>,
}

/// One module's view of module-scope names (declarations are visible in their own module).
#[derive(Debug)]
pub(crate) struct Scope<S> {
    pub(crate) globals: HashMap<String, S>,
    pub(crate) funcs: HashMap<String, u32>,
}

impl<S> Default for Scope<S> {
    fn default() -> Self {
        Scope { globals: HashMap::new(), funcs: HashMap::new() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_weak_definition_gives_way_to_a_visible_one_and_two_visible_ones_conflict() {
        let strong = |m| Def::new(m, Linkage::Visible);
        let weak = |m| Def::new(m, Linkage::Weak);
        assert_eq!(take_definition("function", "f", None, strong(0)), Ok(Take::First));
        assert_eq!(take_definition("function", "f", Some(weak(0)), strong(1)), Ok(Take::Replace));
        assert_eq!(take_definition("function", "f", Some(strong(0)), weak(1)), Ok(Take::Ignore));
        assert_eq!(take_definition("function", "f", Some(weak(0)), weak(1)), Ok(Take::Ignore));
        let e = take_definition("variable", "g", Some(strong(0)), strong(2)).unwrap_err();
        assert!(e.contains("`g`") && e.contains("module 1") && e.contains("module 3"), "{e}");
    }
}
