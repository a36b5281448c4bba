//! Map documents (JSON) as `spares substitute --map`, sparesctl and sparesd read them; a valid
//! one is written back and must read again to the same map.
#![no_main]
use libfuzzer_sys::fuzz_target;
use spares_fuzz as _; // the memory budget (global allocator)
use topology::MapDocument;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(doc) = MapDocument::from_json(text) else {
        return;
    };
    let Ok((map, meta)) = doc.into_map() else {
        return;
    };
    let again = MapDocument::new(&map, &meta);
    let (map2, _) = MapDocument::from_json(&again.to_json())
        .expect("written document parses")
        .into_map()
        .expect("written document is valid");
    assert_eq!(map2.rank_nodes(), map.rank_nodes());
});
