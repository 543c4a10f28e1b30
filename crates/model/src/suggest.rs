//! The one suggestion rule: the known name nearest to a name a user typed ("did you mean"),
//! for samples, plugins, request fields, vendors, families, domain kinds and labels alike.

/// The known name nearest to `word`, if one is close enough to be a slip: at an edit distance of
/// at most a third of its length (and at least 1), else the shortest known name that `word`
/// begins or ends at a `-`/`_` boundary (`gb200` for `gb200-nvl72-tray`, `tpu-v6e-8` for
/// `tpu-v6e`), ignoring case.
pub fn suggest<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let lower = word.to_lowercase();
    let limit = (word.chars().count() / 3).max(1);
    let known: Vec<(String, &str)> = known.into_iter().filter(|k| *k != word).map(|k| (k.to_lowercase(), k)).collect();
    let typo = known.iter().map(|(l, k)| (distance(&lower, l), *k)).filter(|(d, _)| *d <= limit).min();
    if let Some((_, k)) = typo {
        return Some(k.to_owned());
    }
    let boundary = |long: &str, short: &str| {
        short.len() >= 3 && long.starts_with(short) && long[short.len()..].starts_with(['-', '_'])
    };
    known
        .iter()
        .filter(|(l, _)| boundary(l, &lower) || boundary(&lower, l))
        .map(|(l, k)| (l.len(), *k))
        .min()
        .map(|(_, k)| k.to_owned())
}

/// Edit distance over characters, a swap of two neighbours counting one (optimal string
/// alignment): `rakc` is one edit from `rack`.
pub fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_names() {
        assert_eq!(suggest("gb200", ["gb200-nvl72-tray", "dgx-h100"]), Some("gb200-nvl72-tray".into()));
        assert_eq!(suggest("tpu-v6e-8", ["tpu-v6e", "trn2"]), Some("tpu-v6e".into()));
        assert_eq!(suggest("dgx", ["dgx-h100", "dgx-h100-mig"]), Some("dgx-h100".into()), "the shortest");
        assert_eq!(suggest("gb2", ["gb200-nvl72-tray"]), None, "not at a boundary");
        assert_eq!(suggest("xyz", ["rack", "zone"]), None);
        assert_eq!(suggest("dgx-h10", ["gb200-nvl72-tray", "dgx-h100"]), Some("dgx-h100".into()));
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("rakc", "rack"), 1);
    }
}
