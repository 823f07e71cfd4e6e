//! Refusing module functions named a typo away from one the attribute
//! reads.

use syn::ItemMod;

use super::syntax::err;

/// The functions the attribute reads from the module.
const KNOWN_FNS: [&str; 5] = ["forward", "backward", "shape", "dtype", "rows"];

/// Edit distance (insertions, deletions, substitutions) of two short names.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// Refuses module functions whose names are a typo away from one the
/// attribute reads (`backwrd`, `Shape`): the attribute would skip them
/// silently, and the op would lose its gradient or shape rule.
pub(super) fn near_misses(module: &ItemMod, errors: &mut Vec<syn::Error>) {
    let Some((_, items)) = &module.content else {
        return;
    };
    for item in items {
        let syn::Item::Fn(f) = item else { continue };
        let name = f.sig.ident.to_string();
        if KNOWN_FNS.contains(&name.as_str()) {
            continue;
        }
        // typos drop or change letters; longer names (`shapes`,
        // `backwards`) and short ones (`row`) are more likely helpers
        let lower = name.to_lowercase();
        let close = KNOWN_FNS.iter().find(|k| {
            let d = edit_distance(&lower, k);
            let typo = d <= if k.len() > 5 { 2 } else { 1 }
                && lower.len() <= k.len()
                && lower.len() + 1 >= k.len()
                && lower.len() >= 4;
            d == 0 || typo
        });
        if let Some(k) = close {
            err(
                errors,
                f.sig.ident.span(),
                format!(
                    "`fn {name}` is not read by `#[simple_op]`; did you mean `fn {k}`? (a helper named a typo away from `forward`, `backward`, `shape`, `dtype` or `rows` is refused, so that a typo cannot drop one silently: rename it)"
                ),
            );
        }
    }
}
