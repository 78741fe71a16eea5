//! Cases on shapes: tails and odd lengths, head dims, block edges, val_dim != head_dim.

use burn_flash_attn_kernels::FloatKind::{BF16, F16, F32};

use crate::case::case;

forward_cases! {
    // Tails and odd lengths.
    f32_hd32_q1_kv1: case(F32, 32, 1, 1);
    f16_hd32_q1_kv1: case(F16, 32, 1, 1);
    f32_hd64_q113_kv203: case(F32, 64, 113, 203);
    f16_hd64_q113_kv203: case(F16, 64, 113, 203);
    bf16_hd64_q113_kv203: case(BF16, 64, 113, 203);
    f32_hd64_q203_kv113: case(F32, 64, 203, 113);
    f16_hd64_q128_kv217: case(F16, 64, 128, 217);
    f32_hd64_q1_kv203: case(F32, 64, 1, 203);
    f16_hd64_q203_kv1: case(F16, 64, 203, 1);
    f32_hd64_q1023_kv1024: case(F32, 64, 1023, 1024);
    f16_hd64_q1024_kv1023: case(F16, 64, 1024, 1023);
    f16_hd128_q1024_kv1024: case(F16, 128, 1024, 1024);
    f32_hd64_q17_kv9: case(F32, 64, 17, 9);
    // Head dims, odd ones included.
    f32_hd33_q113_kv77: case(F32, 33, 113, 77);
    f16_hd33_q113_kv77: case(F16, 33, 113, 77);
    f32_hd80_q113_kv77: case(F32, 80, 113, 77);
    f16_hd80_q113_kv77: case(F16, 80, 113, 77);
    f32_hd96_q113_kv77: case(F32, 96, 113, 77);
    f16_hd96_q113_kv77: case(F16, 96, 113, 77);
    f32_hd127_q113_kv77: case(F32, 127, 113, 77);
    f16_hd127_q113_kv77: case(F16, 127, 113, 77);
    f32_hd128_q113_kv77: case(F32, 128, 113, 77);
    f16_hd256_q113_kv77: case(F16, 256, 113, 77);
    f32_hd256_q113_kv77: case(F32, 256, 113, 77);
    f16_hd256_q203_kv1023: case(F16, 256, 203, 1023);
    f32_hd256_q203_kv1023: case(F32, 256, 203, 1023);
    f16_hd256_q8_kv520: case(F16, 256, 8, 520);
    f32_hd1_q33_kv40: case(F32, 1, 33, 40);
    f16_hd7_q33_kv40: case(F16, 7, 33, 40);
    bf16_hd128_q113_kv77: case(BF16, 128, 113, 77);
    // Lengths at and around block edges.
    f32_hd64_q63_kv64: case(F32, 64, 63, 64);
    f16_hd64_q64_kv65: case(F16, 64, 64, 65);
    f16_causal_hd64_q65_kv65: case(F16, 64, 65, 65);
    f32_causal_hd32_q16_kv17: case(F32, 32, 16, 17);
    f16_causal_hd128_q33_kv31: case(F16, 128, 33, 31);
    f32_causal_hd48_q129_kv128: case(F32, 48, 129, 128);
    // More head dims, with causal.
    f16_causal_hd48_q100_kv120: case(F16, 48, 100, 120);
    f32_causal_hd160_q70_kv90: case(F32, 160, 70, 90);
    f16_causal_hd200_q70_kv90: case(F16, 200, 70, 90);
    f16_causal_softcap_bias_hd255_q40_kv60: case(F16, 255, 40, 60).softcap(3.0).bias();
    // val_dim != head_dim.
    f32_hd64_dv32_q113_kv203: case(F32, 64, 113, 203).val_dim(32);
    f16_hd33_dv80_q113_kv203: case(F16, 33, 113, 203).val_dim(80);
    f32_hd256_dv48_q65_kv70: case(F32, 256, 65, 70).val_dim(48);
    f16_hd40_dv256_q65_kv70: case(F16, 40, 65, 70).val_dim(256);
    f32_hd16_dv255_q31_kv100: case(F32, 16, 31, 100).val_dim(255);
    f16_causal_hd96_dv64_q203_kv113: case(F16, 96, 203, 113).val_dim(64).causal();
}
