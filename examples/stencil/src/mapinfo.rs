//! What the example reads from a spare map document (`spares plan -o`, `sparesctl show -o`,
//! `SLURM_SPARES_MAP`): the rank grid, and the host of every rank (the hostfile, as
//! `spares rankfile --format hostfile` writes it).

use std::path::Path;

use topology::MapDocument;

use crate::layout::Layout;
use crate::Error;

/// Reads a map document.
pub fn read(path: &Path) -> Result<MapDocument, Error> {
    let text =
        std::fs::read_to_string(path).map_err(Error::io(format!("read map {}", path.display())))?;
    MapDocument::from_json(&text).map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))
}

/// The rank grid of a map.
pub fn layout(doc: &MapDocument) -> Result<Layout, Error> {
    Layout::new(&doc.compute, doc.periodic)
}

fn box_index(doc: &MapDocument, c: &[u32]) -> usize {
    let mut idx = 0usize;
    for d in (0..c.len()).rev() {
        idx = idx * doc.box_extents[d] as usize + c[d] as usize;
    }
    idx
}

fn host(doc: &MapDocument, c: &[u32]) -> Result<String, Error> {
    let hosts = doc
        .hosts
        .as_ref()
        .ok_or_else(|| Error::Invalid("the map has no host names".into()))?;
    hosts
        .get(box_index(doc, c))
        .cloned()
        .ok_or_else(|| Error::Invalid(format!("coordinate {c:?} outside the box")))
}

/// The host of every rank, in rank order.
pub fn rank_hosts(doc: &MapDocument) -> Result<Vec<String>, Error> {
    doc.ranks.iter().map(|c| host(doc, c)).collect()
}

/// The failed nodes' host names.
pub fn failed_hosts(doc: &MapDocument) -> Result<Vec<String>, Error> {
    doc.failed.iter().map(|c| host(doc, c)).collect()
}

/// Every host of the job's box.
pub fn box_hosts(doc: &MapDocument) -> Vec<String> {
    doc.hosts.clone().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use topology::{Grid, MapMeta, Method, Pattern, SpareMap};

    #[test]
    fn hosts_follow_the_box_order() {
        let g = Grid::new(&[4, 4, 2], &[true, true, true]).unwrap();
        let map = SpareMap::new(g, &[3, 3, 2], &[0, 0, 0]).unwrap();
        let meta = MapMeta {
            topology: None,
            origin: vec![0, 0, 0],
            spares: "3D(2,1)".into(),
            method: Method::hybrid(3),
            pattern: Pattern::parse("7p", 3).unwrap(),
            periodic: false,
            hosts: Some((1..=32).map(|i| format!("node{i:02}")).collect()),
        };
        let doc = MapDocument::new(&map, &meta);
        let h = rank_hosts(&doc).unwrap();
        assert_eq!(h.len(), 18);
        assert_eq!(&h[..4], ["node01", "node02", "node03", "node05"]);
        assert_eq!(h[9], "node17");
        assert_eq!(layout(&doc).unwrap().dims, [3, 3, 2]);
        assert!(failed_hosts(&doc).unwrap().is_empty());
    }
}
