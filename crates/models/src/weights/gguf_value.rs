//! GGUF metadata values and their convenience accessors.
//!
//! Writers are not consistent about integer widths (one file stores `context_length` as u32, another as u64), so the
//! accessors convert between widths whenever the value fits, and model code asks for "an unsigned integer" rather
//! than for one exact width.

/// The metadata value type ids of the GGUF format, in file order of their ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgufValueType {
    /// id 0
    U8,
    /// id 1
    I8,
    /// id 2
    U16,
    /// id 3
    I16,
    /// id 4
    U32,
    /// id 5
    I32,
    /// id 6
    F32,
    /// id 7: one byte, 0 or 1
    Bool,
    /// id 8: u64 length + UTF-8 bytes
    String,
    /// id 9: u32 element type + u64 count + elements
    Array,
    /// id 10
    U64,
    /// id 11
    I64,
    /// id 12
    F64,
}

impl GgufValueType {
    /// Decodes a type id; `None` for ids the format does not define.
    pub fn from_id(id: u32) -> Option<Self> {
        use GgufValueType as T;
        Some(match id {
            0 => T::U8,
            1 => T::I8,
            2 => T::U16,
            3 => T::I16,
            4 => T::U32,
            5 => T::I32,
            6 => T::F32,
            7 => T::Bool,
            8 => T::String,
            9 => T::Array,
            10 => T::U64,
            11 => T::I64,
            12 => T::F64,
            _ => return None,
        })
    }

    /// The id written to files.
    pub fn id(self) -> u32 {
        use GgufValueType as T;
        match self {
            T::U8 => 0,
            T::I8 => 1,
            T::U16 => 2,
            T::I16 => 3,
            T::U32 => 4,
            T::I32 => 5,
            T::F32 => 6,
            T::Bool => 7,
            T::String => 8,
            T::Array => 9,
            T::U64 => 10,
            T::I64 => 11,
            T::F64 => 12,
        }
    }

    /// The fewest bytes one value of this type occupies; bounds an array's count by the bytes left before anything
    /// is allocated.
    pub(crate) fn min_size(self) -> u64 {
        use GgufValueType as T;
        match self {
            T::U8 | T::I8 | T::Bool => 1,
            T::U16 | T::I16 => 2,
            T::U32 | T::I32 | T::F32 => 4,
            T::U64 | T::I64 | T::F64 | T::String => 8,
            T::Array => 12,
        }
    }
}

/// One GGUF metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum GgufValue {
    /// uint8
    U8(u8),
    /// int8
    I8(i8),
    /// uint16
    U16(u16),
    /// int16
    I16(i16),
    /// uint32
    U32(u32),
    /// int32
    I32(i32),
    /// uint64
    U64(u64),
    /// int64
    I64(i64),
    /// float32
    F32(f32),
    /// float64
    F64(f64),
    /// bool
    Bool(bool),
    /// string (invalid UTF-8 in a file is replaced by U+FFFD)
    String(String),
    /// array; all elements have one type in the file (an empty array forgets which)
    Array(Vec<GgufValue>),
}

impl GgufValue {
    /// The type id this value is written with.
    pub fn value_type(&self) -> GgufValueType {
        use GgufValueType as T;
        match self {
            GgufValue::U8(_) => T::U8,
            GgufValue::I8(_) => T::I8,
            GgufValue::U16(_) => T::U16,
            GgufValue::I16(_) => T::I16,
            GgufValue::U32(_) => T::U32,
            GgufValue::I32(_) => T::I32,
            GgufValue::U64(_) => T::U64,
            GgufValue::I64(_) => T::I64,
            GgufValue::F32(_) => T::F32,
            GgufValue::F64(_) => T::F64,
            GgufValue::Bool(_) => T::Bool,
            GgufValue::String(_) => T::String,
            GgufValue::Array(_) => T::Array,
        }
    }

    /// Any integer that is not negative, whatever its stored width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            GgufValue::U8(v) => Some(v.into()),
            GgufValue::U16(v) => Some(v.into()),
            GgufValue::U32(v) => Some(v.into()),
            GgufValue::U64(v) => Some(v),
            _ => self.as_i64().and_then(|v| u64::try_from(v).ok()),
        }
    }

    /// Any integer that fits an i64, whatever its stored width.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            GgufValue::I8(v) => Some(v.into()),
            GgufValue::I16(v) => Some(v.into()),
            GgufValue::I32(v) => Some(v.into()),
            GgufValue::I64(v) => Some(v),
            GgufValue::U8(v) => Some(v.into()),
            GgufValue::U16(v) => Some(v.into()),
            GgufValue::U32(v) => Some(v.into()),
            GgufValue::U64(v) => i64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Any float or integer as f64 (rope bases and epsilons are sometimes stored as integers).
    #[allow(clippy::cast_precision_loss)]
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(v) => Some(v.into()),
            GgufValue::F64(v) => Some(v),
            GgufValue::U64(v) => Some(v as f64),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    /// The text of a string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// A bool value.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            GgufValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// The elements of an array value.
    pub fn as_array(&self) -> Option<&[GgufValue]> {
        match self {
            GgufValue::Array(a) => Some(a),
            _ => None,
        }
    }

    /// An array of strings (a vocabulary, merges); `None` if any element is not a string.
    pub fn as_string_array(&self) -> Option<Vec<String>> {
        self.as_array()?.iter().map(|v| v.as_str().map(str::to_string)).collect()
    }

    /// The strings of an array of strings, moved out (no copy: a vocabulary is ~100k of them).
    pub fn into_string_array(self) -> Option<Vec<String>> {
        match self {
            GgufValue::Array(items) => items
                .into_iter()
                .map(|v| match v {
                    GgufValue::String(s) => Some(s),
                    _ => None,
                })
                .collect(),
            _ => None,
        }
    }

    /// An array of numbers as f32 (token scores); `None` if any element is not a number.
    #[allow(clippy::cast_possible_truncation)]
    pub fn as_f32_array(&self) -> Option<Vec<f32>> {
        self.as_array()?.iter().map(|v| v.as_f64().map(|x| x as f32)).collect()
    }

    /// An array of integers as i64 (token types); `None` if any element is not an integer that fits.
    pub fn as_i64_array(&self) -> Option<Vec<i64>> {
        self.as_array()?.iter().map(GgufValue::as_i64).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_widths_convert_when_they_fit() {
        assert_eq!(GgufValue::U32(7).as_u64(), Some(7));
        assert_eq!(GgufValue::I32(7).as_u64(), Some(7));
        assert_eq!(GgufValue::I32(-7).as_u64(), None);
        assert_eq!(GgufValue::U64(u64::MAX).as_i64(), None);
        assert_eq!(GgufValue::U64(u64::MAX).as_u64(), Some(u64::MAX));
        assert_eq!(GgufValue::I8(-3).as_i64(), Some(-3));
        assert_eq!(GgufValue::U16(10).as_f64(), Some(10.0));
        assert_eq!(GgufValue::F32(0.5).as_u64(), None);
        assert_eq!(GgufValue::Bool(true).as_u64(), None);
    }

    #[test]
    fn arrays() {
        let a = GgufValue::Array(vec![GgufValue::String("a".into()), GgufValue::String("b".into())]);
        assert_eq!(a.as_string_array(), Some(vec!["a".to_string(), "b".to_string()]));
        assert_eq!(a.as_f32_array(), None);
        let n = GgufValue::Array(vec![GgufValue::F32(1.5), GgufValue::I32(-2)]);
        assert_eq!(n.as_f32_array(), Some(vec![1.5, -2.0]));
        assert_eq!(n.as_i64_array(), None);
    }

    #[test]
    fn type_ids_round_trip() {
        for id in 0..13 {
            assert_eq!(GgufValueType::from_id(id).map(GgufValueType::id), Some(id));
        }
        assert_eq!(GgufValueType::from_id(13), None);
    }
}
