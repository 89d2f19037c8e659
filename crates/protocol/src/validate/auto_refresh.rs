//! Refreshes inserted where a CKKS computation runs out of levels: a
//! planner pass for sessions with a refresh part, so that a graph deeper
//! than its parameters runs (through the key holder) instead of being
//! refused.
//!
//! The rule is the paper's layer-by-layer one: whenever a node that spends
//! levels (a rescale, a product by a real constant, a Chebyshev polynomial)
//! would leave its ciphertext below the lowest level a refresh accepts
//! ([`hecloud_ckks::refresh::MaskPolicy::lowest_level`]), its ciphertext
//! operands are refreshed to the top level first, so that no value falls
//! where it could no longer be refreshed. Refreshes the graph turns out not
//! to need (typically near its outputs, which may end at any level) are
//! then taken back one by one, each only if the graph still validates.
//! The schedule is visible in the cost estimate
//! ([`super::CostEstimate::refreshes`]).
//!
//! A session with a bootstrapping part and no CKKS refresh part (no key
//! holder), or one that prefers bootstrapping, gets bootstrap nodes
//! instead ([`crate::Op::Bootstrap`]): the server alone makes the fresh
//! ciphertext, in seconds rather than a round trip. A bootstrap takes a
//! ciphertext at any level, so the rule there is the refusal: a node
//! refused for want of levels (or a product left at level 0 with its
//! rescale still to come) gets its CKKS operands bootstrapped, and is
//! checked again.
//!
//! BGV has no levels a refresh must stay above (a masked BGV ciphertext
//! goes at level 0, or with flooding at the lowest level that holds the
//! flood), so its rule is simpler: a BGV node refused for want of noise
//! budget, levels or depth gets its BGV operands refreshed to the top
//! level, if they can be, and is checked again.

use std::collections::{BTreeSet, HashMap};

use super::structure;
use super::types::Checker;
use super::{BootstrapCaps, Capabilities, VResult, ValidationLimits, ValueType};
use crate::error::ValidationError;
use crate::graph::{Graph, NodeId, Op};

/// Whether `op` spends levels of its ciphertext operand.
fn spends_levels(op: &Op) -> bool {
    matches!(op, Op::Rescale(_) | Op::Mul(..) | Op::Chebyshev { .. })
}

/// `graph` with refreshes where its CKKS values would run out of levels or
/// its BGV values out of noise budget, as few as validation (under
/// `limits`) allows; `graph` itself when the session can refresh neither
/// scheme (no parameters or no refresh part naming its public key) or the
/// graph needs no refresh. Call it when validation refused a graph for want
/// of levels, budget or depth (each refresh it considers taking back costs
/// a validation). Other errors are returned as [`super::validate`] returns
/// them.
pub fn insert_refreshes(
    graph: &Graph,
    caps: &Capabilities,
    inputs: &[ValueType],
    limits: &ValidationLimits,
) -> VResult<Graph> {
    let ckks = caps.ckks.is_some() && (caps.refresh_ckks || caps.bootstrap.is_some());
    let bgv = caps.bgv.is_some() && caps.refresh_bgv;
    if !ckks && !bgv {
        return Ok(graph.clone());
    }
    // Bootstrapping where there is no key holder to refresh, or where the
    // session asks for it; refresh first otherwise, and bootstrapping where
    // refreshes cannot carry the graph (a chain too short for the mask's
    // headroom).
    let modes: &[Option<BootstrapCaps>] = match caps.bootstrap {
        Some(b) if !caps.refresh_ckks || b.prefer_over_refresh => &[Some(b)],
        Some(b) => &[None, Some(b)],
        None => &[None],
    };
    let mut first = None;
    for &boot in modes {
        let planned = plan_with_take_backs(graph, caps, inputs, limits, boot);
        if let Ok(g) = &planned
            && super::validate_with_limits(g, caps, inputs, limits).is_ok()
        {
            return planned;
        }
        first.get_or_insert(planned);
    }
    // No mode carries the graph: the first one's plan, or its refusal.
    first.unwrap_or_else(|| Ok(graph.clone()))
}

/// The planned graph in one mode (`boot`: bootstraps for CKKS, else
/// refreshes), with the refreshes it turns out not to need taken back.
fn plan_with_take_backs(
    graph: &Graph,
    caps: &Capabilities,
    inputs: &[ValueType],
    limits: &ValidationLimits,
    boot: Option<BootstrapCaps>,
) -> VResult<Graph> {
    let mut skip = BTreeSet::new();
    let (mut best, consumers) = plan(graph, caps, inputs, &skip, boot)?;
    // Take back the last refreshes first: those are the likeliest to be
    // unneeded (a graph may end below the lowest refresh level).
    for c in consumers.into_iter().rev() {
        skip.insert(c);
        match plan(graph, caps, inputs, &skip, boot) {
            Ok((g, _)) if super::validate_with_limits(&g, caps, inputs, limits).is_ok() => best = g,
            _ => {
                skip.remove(&c);
            }
        }
    }
    Ok(best)
}

/// Whether a BGV node's refusal is one a refresh of its operands can lift.
fn bgv_out_of_depth(e: &ValidationError) -> bool {
    matches!(
        e,
        ValidationError::BudgetExhausted { .. }
            | ValidationError::LevelsExhausted { .. }
            | ValidationError::DepthExhausted { .. }
    )
}

/// One planning pass: the graph with refreshes (bootstraps with `boot`)
/// before every level-spending CKKS node not in `skip` that would leave
/// its value below the lowest refresh level, and before every BGV node not
/// in `skip` refused for want of depth, and those nodes in the order they
/// were met.
fn plan(
    graph: &Graph,
    caps: &Capabilities,
    inputs: &[ValueType],
    skip: &BTreeSet<NodeId>,
    boot: Option<BootstrapCaps>,
) -> VResult<(Graph, Vec<NodeId>)> {
    let ckks = caps
        .ckks
        .as_ref()
        .filter(|_| caps.refresh_ckks || boot.is_some());
    let bgv = caps.bgv.as_ref().filter(|_| caps.refresh_bgv);
    let policy = caps.mask_policy;
    let structure = structure::check(graph, inputs.len())?;
    let mut g = graph.clone();
    let mut cx = Checker::new(caps);
    let mut types: Vec<Option<ValueType>> = vec![None; g.nodes.len()];
    let mut refreshed: HashMap<NodeId, NodeId> = HashMap::new();
    let mut consumers = Vec::new();
    let check = |cx: &mut Checker<'_>, g: &Graph, types: &[Option<ValueType>], id: NodeId| {
        let args: Vec<&ValueType> = g.nodes[id as usize]
            .operands()
            .iter()
            .map(|&m| types[m as usize].as_ref().expect("operands come first"))
            .collect();
        cx.check(id, &g.nodes[id as usize], &args, inputs)
    };
    for &id in &structure.order {
        let first = check(&mut cx, &g, &types, id);
        let is_bgv = super::bgv::is_bgv_op(&g.nodes[id as usize]);
        let low = match (&first, ckks) {
            // A BGV node refused for want of budget, levels or depth: its
            // operands are the ones to refresh.
            (Err(e), _) if is_bgv => bgv.is_some() && bgv_out_of_depth(e),
            (_, None) => false,
            // Refused for want of levels (a polynomial deeper than what is
            // left): its operands are the ones to refresh.
            (
                Err(
                    ValidationError::LevelsExhausted { .. } | ValidationError::ScaleOverflow { .. },
                ),
                Some(_),
            ) => true,
            (Err(_), Some(_)) => false,
            (Ok(t), Some(params)) => match *t {
                ValueType::CkksCiphertext { level, scale, .. } => {
                    // A product that multiplied the scale is rescaled next: it
                    // has one level fewer than it shows, and its own scale
                    // (about Δ²) is too wide to mask, so its operands are the
                    // ones to refresh.
                    let operand_scale = g.nodes[id as usize]
                        .operands()
                        .iter()
                        .filter_map(|&m| match types[m as usize] {
                            Some(ValueType::CkksCiphertext { scale, .. }) => Some(scale),
                            _ => None,
                        })
                        .fold(0.0, f64::max);
                    let pending = usize::from(scale > 1.5 * operand_scale);
                    match boot {
                        // Any level is bootstrapped; only a rescale that
                        // would find no level below is too late.
                        Some(_) => level < pending,
                        None => policy
                            .lowest_level(params, operand_scale.max(1.0))
                            .is_some_and(|l| level < l + pending),
                    }
                }
                _ => false,
            },
        };
        let mut t = first;
        let spends = is_bgv || spends_levels(&g.nodes[id as usize]);
        if low && spends && !skip.contains(&id) {
            let mut operands = g.nodes[id as usize].operands();
            operands.sort_unstable();
            operands.dedup();
            let mut any = false;
            for m in operands {
                // The top level to refresh to, where the operand can be.
                let top = match (types[m as usize].as_ref(), ckks, bgv) {
                    (
                        Some(&ValueType::CkksCiphertext {
                            level,
                            scale,
                            degree: 1,
                        }),
                        Some(params),
                        _,
                    ) if !is_bgv => match boot {
                        Some(b) => {
                            if level >= b.output_level || scale > b.max_input_scale {
                                continue;
                            }
                            b.output_level
                        }
                        None => {
                            // In a bootstrappable chain the levels above the
                            // circuit's output are its own.
                            let top = caps
                                .bootstrap
                                .map_or(params.max_level(), |b| b.output_level);
                            if level >= top || policy.check_level(params, level, scale).is_err() {
                                continue;
                            }
                            top
                        }
                    },
                    (Some(&ValueType::BgvCiphertext { level, .. }), _, Some(params)) if is_bgv => {
                        // A refresh's own result is as fresh as it gets.
                        if matches!(g.nodes[m as usize], Op::BgvRefresh(..))
                            || caps.bgv_mask_policy.check_level(params, level).is_err()
                        {
                            continue;
                        }
                        params.max_level()
                    }
                    _ => continue,
                };
                let r = match refreshed.get(&m) {
                    Some(&r) => r,
                    None => {
                        let r = if is_bgv {
                            g.bgv_refresh(m, top as u32)
                        } else if boot.is_some() {
                            g.bootstrap(m)
                        } else {
                            g.refresh(m, top as u32)
                        };
                        types.push(None);
                        types[r as usize] = Some(check(&mut cx, &g, &types, r)?);
                        refreshed.insert(m, r);
                        r
                    }
                };
                for slot in g.nodes[id as usize].operands_mut() {
                    if *slot == m {
                        *slot = r;
                    }
                }
                any = true;
            }
            if any {
                consumers.push(id);
                t = check(&mut cx, &g, &types, id);
            }
        }
        types[id as usize] = Some(t?);
    }
    Ok((g, consumers))
}
