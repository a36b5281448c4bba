//! Spare shapes `qD(r,s)/dims=../side=..` and the plans they give on a small network.
#![no_main]
use libfuzzer_sys::fuzz_target;
use spares_fuzz as _; // the memory budget (global allocator)
use topology::shape::{AllocationUnit, Plan};
use topology::SpareShape;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(shape) = SpareShape::parse(text) else {
        return;
    };
    let printed = shape.to_string();
    assert_eq!(
        SpareShape::parse(&printed).expect("printed shape parses"),
        shape
    );
    let net = vec![12u32; shape.q];
    let compute = vec![5u32; shape.q];
    for unit in [AllocationUnit::Node, AllocationUnit::PowerOfTwo] {
        let _ = Plan::for_compute(&compute, Some(&shape), &unit, &net);
    }
    let _ = Plan::for_box(&net, Some(&shape));
});
