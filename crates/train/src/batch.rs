//! A batch of equal-length sequences and the token each row is trained to predict.

use crate::TrainError;

/// `seqs` sequences of `len` tokens, flattened row-major, and each row's target (`None`: not trained on, as
/// transformers' label -100).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// Token ids, `seqs × len`.
    pub ids: Vec<u32>,
    /// The next token each row predicts.
    pub targets: Vec<Option<u32>>,
    /// Sequences.
    pub seqs: usize,
    /// Tokens a sequence.
    pub len: usize,
}

impl Batch {
    /// A batch from token rows and transformers-style labels (a row's label is the token at that position, or
    /// None to leave it out): the target of position i is the label at i + 1, as transformers shifts them, and
    /// the last position predicts nothing. Without labels every next token counts.
    pub fn shifted(rows: &[Vec<u32>], labels: Option<&[Vec<Option<u32>>]>) -> Result<Self, TrainError> {
        let len = rows.first().map_or(0, Vec::len);
        if len == 0 {
            return Err(TrainError::refused("batch", "empty", "needs at least one token a sequence"));
        }
        if let Some((i, r)) = rows.iter().enumerate().find(|(_, r)| r.len() != len) {
            return Err(TrainError::refused(format!("sequence {i}"), r.len(), format!("tokens; sequence 0 has {len}")));
        }
        let mut targets = Vec::with_capacity(rows.len() * len);
        for (i, r) in rows.iter().enumerate() {
            let lab: Vec<Option<u32>> = match labels {
                Some(l) => {
                    let l = l.get(i).ok_or_else(|| TrainError::refused("labels", l.len(), "fewer rows than ids"))?;
                    if l.len() != len {
                        return Err(TrainError::refused(format!("labels {i}"), l.len(), format!("must be {len} long")));
                    }
                    l.clone()
                }
                None => r.iter().map(|&t| Some(t)).collect(),
            };
            targets.extend(lab[1..].iter().copied());
            targets.push(None);
        }
        Ok(Batch { ids: rows.concat(), targets, seqs: rows.len(), len })
    }

    /// How many rows have a target (the loss's divisor).
    pub fn counted(&self) -> usize {
        self.targets.iter().filter(|t| t.is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_the_next_label_and_ragged_rows_are_refused() {
        let b = Batch::shifted(
            &[vec![5, 6, 7], vec![8, 9, 10]],
            Some(&[vec![Some(5), Some(6), Some(7)], vec![Some(8), None, Some(10)]]),
        )
        .unwrap();
        assert_eq!(b.targets, vec![Some(6), Some(7), None, None, Some(10), None]);
        assert_eq!(b.counted(), 3);
        let e = Batch::shifted(&[vec![1, 2], vec![3]], None).unwrap_err().to_string();
        assert!(e.contains("sequence 1 = 1"), "{e}");
    }
}
