//! The one pipeline ([`Problem`]) from each entry — a `remat.graph` document, a `remat.joint`
//! document, a traced joint graph, a forward graph, and `Model` — with every strategy, checked
//! against the partitioner and the planner called directly, and `peak=` against a sweep of every
//! byte budget's plan.

use remat_core::PEAK_STOPPING_GAP;
use remat_core::{partition_with, peak_lower_bound, read_document, read_joint, Document, PGraph, Report};
use remat_core::{Budget, CostModel, Error, Graph, JointGraph, Model, Partition, Plan, Problem, SearchTime, Strategy};
use remat_zoo::{self as zoo, MlpConfig};

const GRAPH_DOC: &str = include_str!("../../docs/examples/two_regions.graph.json");
const JOINT_DOC: &str = include_str!("../../docs/examples/small.joint.json");

/// Every strategy but `peak=`, which the tests below check by its own oracle.
fn strategies() -> Vec<Strategy> {
    ["respect", "mincut", "budget=0.5", "budget=256", "budget+offload=0.5"].iter().map(|s| s.parse().unwrap()).collect()
}

fn mlp() -> Graph {
    zoo::mlp(&MlpConfig { batch: 2, widths: vec![3, 8, 8, 2] }).unwrap()
}

/// The partition graph and joint graph of the `remat.graph` document, made without the pipeline.
fn graph_doc_by_hand() -> (PGraph, JointGraph) {
    let Document::Graph(g, ids) = read_document(GRAPH_DOC).unwrap() else { panic!("a remat.graph") };
    let joint = JointGraph::new(&g).unwrap();
    (PGraph::from_joint_with_ids(&joint, &ids), joint)
}

/// A graph the planner takes (the joint graph, or a partition graph whose forward nodes come
/// first), planned without the pipeline.
trait Planner {
    fn plan_by_hand(&self, p: &Partition) -> Plan;
}

impl Planner for JointGraph {
    fn plan_by_hand(&self, p: &Partition) -> Plan {
        let n = self.n_forward();
        Plan::with_offload(self, &p.saved[..n], &p.offloaded[..n], &CostModel::default()).unwrap()
    }
}

impl Planner for PGraph {
    fn plan_by_hand(&self, p: &Partition) -> Plan {
        let n = self.nodes.iter().filter(|node| !node.backward).count();
        Plan::with_offload(self, &p.saved[..n], &p.offloaded[..n], &CostModel::default()).unwrap()
    }
}

/// The plan of `p` over `planner`, made without the pipeline.
fn plan_by_hand(planner: &(impl Planner + ?Sized), p: &Partition) -> Plan {
    planner.plan_by_hand(p)
}

#[test]
fn every_entry_partitions_and_plans_as_the_partitioner_and_planner_do() {
    let model = CostModel::default();
    let (doc_pg, doc_joint) = graph_doc_by_hand();
    let joint_pg = read_joint(JOINT_DOC).unwrap();
    let traced = JointGraph::new(&mlp()).unwrap();
    let traced_pg = PGraph::from_joint(&traced);
    let entries: [(&str, Problem<'_>, &PGraph, &dyn Planner); 4] = [
        ("remat.graph", Problem::read(GRAPH_DOC).unwrap(), &doc_pg, &doc_joint),
        ("remat.joint", Problem::read(JOINT_DOC).unwrap(), &joint_pg, &joint_pg),
        ("traced joint graph", Problem::from_joint(&traced), &traced_pg, &traced),
        ("forward graph", Problem::from_forward(mlp()).unwrap(), &traced_pg, &traced),
    ];
    for (entry, problem, pg, planner) in &entries {
        for strategy in strategies() {
            let solved = problem.partition(strategy, &model).unwrap();
            let direct = partition_with(pg, strategy, &model).unwrap();
            // The JSON written while the plan is made is the report's, byte for byte.
            let mut written = Vec::new();
            let (also, io) = problem.partition_json(strategy, &model, &mut written).unwrap();
            io.unwrap();
            assert_eq!(String::from_utf8(written).unwrap(), solved.report().json(), "{entry}, {strategy}");
            assert_eq!(also.partition(), solved.partition(), "{entry}, {strategy}");
            assert_eq!(solved.partition(), &direct, "{entry}, {strategy}");
            // Every entry plans as its joint graph (or a joint document's own graph) does.
            let (plan, by_hand) = (solved.plan(), plan_by_hand(*planner, &direct));
            assert_eq!(plan.steps().collect::<Vec<_>>(), by_hand.steps().collect::<Vec<_>>(), "{entry}, {strategy}");
            assert_eq!(plan.predicted_peak(), by_hand.predicted_peak(), "{entry}, {strategy}");
            assert_eq!(plan.predicted_host_peak(), by_hand.predicted_host_peak(), "{entry}, {strategy}");
            let json: serde_json::Value = serde_json::from_str(&solved.report().json()).unwrap();
            assert_eq!(json["planned_peak"], by_hand.predicted_peak() as u64, "{entry}, {strategy}");
        }
    }
    // Model plans through the same step.
    for strategy in strategies() {
        let m = Model::with_strategy(mlp(), strategy).unwrap();
        let direct = partition_with(&traced_pg, strategy, &model).unwrap();
        assert_eq!(m.partition().unwrap().saved, direct.saved, "Model, {strategy}");
        assert_eq!(m.plan().predicted_peak(), plan_by_hand(&traced, &direct).predicted_peak(), "Model, {strategy}");
    }
}

/// The least recompute among the plans of every byte budget (in steps of `step` bytes up to
/// everything the graph holds) whose predicted peak is at most `limit`: the family `peak=`
/// searches, swept without it.
fn least_recompute_within(planner: &(impl Planner + ?Sized), pg: &PGraph, limit: u64, step: u64) -> Option<u64> {
    let total: u64 = pg.nodes.iter().map(|n| n.bytes).sum();
    (0..=total / step + 1)
        .filter_map(|k| partition_with(pg, Strategy::Budget(Budget::Bytes(k * step)), &CostModel::default()).ok())
        .filter(|p| plan_by_hand(planner, p).predicted_peak() as u64 <= limit)
        .map(|p| p.recompute_flops)
        .min()
}

/// A limit some plan meets: the predicted peak of `budget=0.5`'s plan, where the search has a
/// choice to make between plans that save more and peak higher and plans that recompute more.
fn limit_between(planner: &(impl Planner + ?Sized), pg: &PGraph) -> u64 {
    let half = partition_with(pg, Strategy::Budget(Budget::Fraction(0.5)), &CostModel::default()).unwrap();
    plan_by_hand(planner, &half).predicted_peak() as u64
}

#[test]
fn peak_works_from_every_entry_within_the_limit_at_the_least_recompute_of_a_budget_sweep() {
    let model = CostModel::default();
    let (doc_pg, doc_joint) = graph_doc_by_hand();
    let joint_pg = read_joint(JOINT_DOC).unwrap();
    let traced = JointGraph::new(&mlp()).unwrap();
    let traced_pg = PGraph::from_joint(&traced);
    let cases: [(&str, Problem<'_>, u64, Option<u64>); 4] = {
        let doc_limit = limit_between(&doc_joint, &doc_pg);
        let joint_limit = limit_between(&joint_pg, &joint_pg);
        let traced_limit = limit_between(&traced, &traced_pg);
        [
            (
                "remat.graph",
                Problem::read(GRAPH_DOC).unwrap(),
                doc_limit,
                least_recompute_within(&doc_joint, &doc_pg, doc_limit, 4),
            ),
            (
                "remat.joint",
                Problem::read(JOINT_DOC).unwrap(),
                joint_limit,
                least_recompute_within(&joint_pg, &joint_pg, joint_limit, 4),
            ),
            (
                "traced joint graph",
                Problem::from_joint(&traced),
                traced_limit,
                least_recompute_within(&traced, &traced_pg, traced_limit, 4),
            ),
            (
                "forward graph",
                Problem::from_forward(mlp()).unwrap(),
                traced_limit,
                least_recompute_within(&traced, &traced_pg, traced_limit, 4),
            ),
        ]
    };
    for (entry, problem, limit, least) in &cases {
        let solved = problem.partition(Strategy::Peak(*limit), &model).unwrap();
        let plan = solved.plan();
        assert!(plan.predicted_peak() as u64 <= *limit, "{entry}: {} > {limit}", plan.predicted_peak());
        assert_eq!(solved.partition().strategy, Strategy::Peak(*limit), "{entry}");
        let least = least.unwrap_or_else(|| panic!("{entry}: the sweep meets the limit by construction"));
        assert!(solved.partition().recompute_flops <= least, "{entry}: more recompute than the sweep's {least}");
    }
    // Model's peak is the traced entry's.
    let limit = limit_between(&traced, &traced_pg);
    let m = Model::with_strategy(mlp(), Strategy::Peak(limit)).unwrap();
    assert!(m.plan().predicted_peak() as u64 <= limit);
    let problem = Problem::from_joint(&traced);
    let solved = problem.partition(Strategy::Peak(limit), &model).unwrap();
    assert_eq!(m.partition().unwrap(), solved.partition());
}

/// The shortest search time a problem takes still answers within the limit, at no more recompute
/// than the min-cut's plan where that fits, or refuses naming the least peak: a search cut short
/// keeps the plans it started from. The 2-layer Llama of docs/peak from the min-cut's peak down to
/// below the least peak; the small documents solve within the time, as by default.
#[test]
fn the_shortest_search_time_answers_within_the_limit_or_refuses() {
    let model = CostModel::default();
    let quick = SearchTime::new(SearchTime::LEAST).unwrap();
    for doc in [JOINT_DOC, GRAPH_DOC] {
        let limit =
            Problem::read(doc).unwrap().partition(Strategy::MinCut, &model).unwrap().plan().predicted_peak() as u64;
        let (usual, quick_one) = (Problem::read(doc).unwrap(), Problem::read(doc).unwrap().with_search_time(quick));
        let by_default = usual.partition(Strategy::Peak(limit), &model).unwrap();
        let quickly = quick_one.partition(Strategy::Peak(limit), &model).unwrap();
        assert_eq!(quickly.partition(), by_default.partition(), "a small document within {quick}");
    }
    let llama = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/peak/llama.joint.json")).unwrap();
    let problem = Problem::read(&llama).unwrap().with_search_time(quick);
    let mincut = problem.partition(Strategy::MinCut, &model).unwrap();
    let (high, mincut_flops) = (mincut.plan().predicted_peak() as u64, mincut.partition().recompute_flops);
    // Down to 80 % of the min-cut's peak: below the least peak of any plan (about 92 %).
    let low = high * 4 / 5;
    for k in 0..=4 {
        let limit = low + (high - low) * k / 4;
        match problem.partition(Strategy::Peak(limit), &model) {
            Ok(solved) => {
                assert!(solved.plan().predicted_peak() as u64 <= limit, "peak={limit}");
                let gap = solved.partition().optimality_gap.expect("a peak answer carries its gap");
                assert!((0.0..=1.0).contains(&gap), "peak={limit}: gap {gap}");
                if limit == high {
                    assert!(solved.partition().recompute_flops <= mincut_flops, "peak={limit}: above the min-cut's");
                }
                // The report says what kind of search answered, and where it stopped short of
                // 1 %, that more time may narrow the gap.
                let text = solved.report().text();
                assert!(text.contains("peak search: "), "peak={limit}: {text}");
                assert_eq!(
                    text.contains("more search time may narrow it"),
                    gap > PEAK_STOPPING_GAP,
                    "peak={limit}: {text}"
                );
            }
            Err(Error::Infeasible { least, message, .. }) => {
                assert!(limit < high, "peak={limit}: the min-cut's own peak refused: {message}");
                assert!(message.contains("cannot be met") || message.contains("was not met"), "{message}");
                assert!(!message.contains("below 0 bytes"), "peak={limit}: a bound of nothing named: {message}");
                assert!(least.is_none_or(|l| l > limit), "peak={limit}: {message}");
            }
            Err(e) => panic!("peak={limit}: {e}"),
        }
    }
}

#[test]
fn a_peak_below_the_lower_bound_is_refused_from_every_entry() {
    let traced = JointGraph::new(&mlp()).unwrap();
    let joint_pg = read_joint(JOINT_DOC).unwrap();
    let (_, doc_joint) = graph_doc_by_hand();
    let below = |b: u64| Strategy::Peak(b - 1);
    for (entry, problem, bound) in [
        ("remat.graph", Problem::read(GRAPH_DOC).unwrap(), peak_lower_bound(&doc_joint).unwrap().bytes),
        ("remat.joint", Problem::read(JOINT_DOC).unwrap(), peak_lower_bound(&joint_pg).unwrap().bytes),
        ("traced joint graph", Problem::from_joint(&traced), peak_lower_bound(&traced).unwrap().bytes),
    ] {
        let e = problem.partition(below(bound), &CostModel::default()).unwrap_err().to_string();
        assert!(e.contains("cannot be met") && e.contains(&format!("below {bound} bytes")), "{entry}: {e}");
        assert!(!e.contains('\n'), "{entry}: {e}");
    }
}

/// `doc` (a `remat.joint` document) with its nodes listed forward first, each phase in the
/// document's order: made here from the JSON, not by the library's reorder.
fn forward_first_by_hand(doc: &str) -> String {
    let mut json: serde_json::Value = serde_json::from_str(doc).unwrap();
    let nodes = json["nodes"].as_array_mut().unwrap();
    let backward = |n: &serde_json::Value| n["phase"] == "backward";
    let (mut forward, later): (Vec<_>, Vec<_>) = nodes.drain(..).partition(|n| !backward(n));
    assert!(!later.is_empty() && !forward.is_empty());
    forward.extend(later);
    *nodes = forward;
    json.to_string()
}

/// A plan's programs, each step named by its node's document id.
fn named_steps(problem: &Problem<'_>, plan: &Plan) -> Vec<String> {
    plan.steps()
        .map(|s| {
            format!("{s:?}").split('(').next().unwrap().to_string() + " " + &problem.graph().node(s.node()).id.label()
        })
        .collect()
}

#[test]
fn a_pytorch_joint_document_is_planned_in_its_order_with_its_forward_nodes_first() {
    let model = CostModel::default();
    // `peak=` walks the byte-budget plans, which on the transformer's 418 nodes takes minutes:
    // the chain alone is searched.
    for (doc, search) in [
        (include_str!("../../tests/fixtures/torch/chain-inductor__full.json"), true),
        (include_str!("../../tests/fixtures/torch/transformer-inductor__full.json"), false),
    ] {
        let interleaved = Problem::read(doc).unwrap();
        let by_hand = Problem::read(&forward_first_by_hand(doc)).unwrap();
        let peak_of = |s: &str| interleaved.partition(s.parse().unwrap(), &model).unwrap().plan().predicted_peak();
        // Fewer saved bytes need not peak lower: the two ends in whichever order they fall.
        let (lowest, highest) = {
            let (a, b) = (peak_of("budget=0.0"), peak_of("budget=1.0"));
            (a.min(b), a.max(b))
        };
        let peak = format!("peak={}", lowest + (highest - lowest) / 2);
        let strategies = ["respect", "mincut", "budget=0.5", "budget+offload=0.5", &peak];
        for strategy in strategies.map(|s| s.parse::<Strategy>().unwrap()) {
            if matches!(strategy, Strategy::Peak(_)) && !search {
                continue;
            }
            let (a, b) =
                (interleaved.partition(strategy, &model).unwrap(), by_hand.partition(strategy, &model).unwrap());
            assert_eq!(named_steps(&interleaved, a.plan()), named_steps(&by_hand, b.plan()), "{strategy}");
            assert_eq!(a.plan().predicted_peak(), b.plan().predicted_peak(), "{strategy}");
            assert_eq!(a.partition().recompute_flops, b.partition().recompute_flops, "{strategy}");
            let json: serde_json::Value = serde_json::from_str(&a.report().json()).unwrap();
            assert_eq!(json["planned_peak"], a.plan().predicted_peak() as u64, "{strategy}");
            // The plan names the document's own nodes: the forward program computes forward ones.
            for step in a.plan().forward() {
                assert!(!interleaved.graph().node(step.node()).backward, "{strategy}: {step:?}");
            }
        }
        // A limit below the lower bound is refused at once.
        let e = interleaved.partition(Strategy::Peak(1), &model).unwrap_err().to_string();
        assert!(e.contains("cannot be met"), "{e}");
    }
}

#[test]
fn evaluate_json_is_the_report_and_three_fields() {
    let problem = Problem::read(JOINT_DOC).unwrap();
    let scored = problem.evaluate(["1", "2", "3", "2"]).unwrap();
    assert_eq!(scored.given().len(), 3);
    let mut json: serde_json::Value = serde_json::from_str(&scored.json()).unwrap();
    let report = Report::new(problem.graph(), &scored.evaluation().partition)
        .with_planned_peak(scored.plan().predicted_peak() as u64)
        .with_host_peaks(0, None)
        .with_heading("evaluate", "given");
    let expected: serde_json::Value = serde_json::from_str(&report.json()).unwrap();
    let map = json.as_object_mut().unwrap();
    assert_eq!(map.remove("given").unwrap(), serde_json::json!([1, 2, 3]));
    assert_eq!(map.remove("broken").unwrap(), serde_json::json!(scored.evaluation().broken));
    assert_eq!(map.remove("unneeded").unwrap(), serde_json::json!([1, 2]));
    assert_eq!(json, expected);
    let keys = |v: &serde_json::Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&json), keys(&expected), "the same fields in the same order");
}

/// `remat evaluate` gives the peak of any saved set: a strategy's own saved set, evaluated, peaks
/// where that strategy's plan does (the planner's peak, reached through another path), and the
/// planned peak is in the JSON.
#[test]
fn evaluate_plans_the_given_decision_as_the_strategy_that_made_it() {
    let model = CostModel::default();
    for doc in [JOINT_DOC, GRAPH_DOC, include_str!("../../tests/fixtures/torch/chain-inductor__full.json")] {
        let problem = Problem::read(doc).unwrap();
        for strategy in ["mincut", "budget=0.0", "budget=0.5", "budget=1.0"] {
            let solved = problem.partition(strategy.parse().unwrap(), &model).unwrap();
            let g = problem.graph();
            let saved: Vec<String> = g
                .ids()
                .filter(|&i| solved.partition().saved[i.index()] && !g.node(i).backward)
                .map(|i| g.node(i).id.label().trim_start_matches('%').to_string())
                .collect();
            let scored = problem.evaluate(saved.iter().map(String::as_str)).unwrap();
            assert!(scored.evaluation().broken.is_empty(), "{strategy}: {:?}", scored.evaluation().broken);
            assert_eq!(scored.evaluation().partition.saved, solved.partition().saved, "{strategy}");
            assert_eq!(scored.plan().predicted_peak(), solved.plan().predicted_peak(), "{strategy}");
            let json: serde_json::Value = serde_json::from_str(&scored.json()).unwrap();
            assert_eq!(json["planned_peak"], solved.plan().predicted_peak() as u64, "{strategy}");
            assert!(scored.text().contains("peak memory: planned"), "{strategy}");
        }
    }
}
