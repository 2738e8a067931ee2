//! Splitting a (2-D) copy into pieces that fit one staging buffer.
//!
//! Copies between the application's memory and the device pass through page-locked staging
//! buffers of fixed size; a piece is a rectangle of the copy (`rows` rows of `cols` bytes,
//! starting at row `row0`, column `col0`) that fits one buffer packed without pitch. Rows
//! narrower than a buffer are grouped; rows wider than a buffer are cut.

/// One piece of a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub row0: u64,
    pub rows: u64,
    pub col0: u64,
    pub cols: u64,
}

impl Piece {
    /// Bytes of the piece packed in a staging buffer.
    pub fn bytes(&self) -> u64 {
        self.rows * self.cols
    }
}

/// Cover `height` rows of `width` bytes with pieces of at most `stage` bytes, in copy order.
pub fn pieces(width: u64, height: u64, stage: u64) -> Vec<Piece> {
    let mut out = Vec::new();
    if width == 0 || height == 0 || stage == 0 {
        return out;
    }
    if width <= stage {
        let per = (stage / width).max(1);
        let mut row = 0;
        while row < height {
            let rows = per.min(height - row);
            out.push(Piece { row0: row, rows, col0: 0, cols: width });
            row += rows;
        }
    } else {
        for row in 0..height {
            let mut col = 0;
            while col < width {
                let cols = stage.min(width - col);
                out.push(Piece { row0: row, rows: 1, col0: col, cols });
                col += cols;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn narrow_rows_are_grouped_to_fill_a_buffer() {
        let p = pieces(100, 25, 1000);
        assert_eq!(p, vec![Piece { row0: 0, rows: 10, col0: 0, cols: 100 }, Piece { row0: 10, rows: 10, col0: 0, cols: 100 }, Piece { row0: 20, rows: 5, col0: 0, cols: 100 }]);
    }

    #[test]
    fn wide_rows_are_cut() {
        let p = pieces(2500, 2, 1000);
        assert_eq!(p.len(), 6);
        assert_eq!(p[2], Piece { row0: 0, rows: 1, col0: 2000, cols: 500 });
    }

    proptest! {
        #[test]
        fn pieces_cover_every_byte_once_and_fit_the_buffer(w in 1u64..5000, h in 1u64..50, stage in 1u64..4096) {
            let ps = pieces(w, h, stage);
            let mut covered = vec![0u8; (w * h) as usize];
            for p in &ps {
                prop_assert!(p.bytes() <= stage.max(w.min(stage)));
                for r in p.row0..p.row0 + p.rows {
                    for c in p.col0..p.col0 + p.cols {
                        covered[(r * w + c) as usize] += 1;
                    }
                }
            }
            prop_assert!(covered.iter().all(|&c| c == 1));
        }
    }
}
