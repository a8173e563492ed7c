"""The datasheet table: sane figures, and device names mapped to the right spec."""
import pytest

from tilegym_edu.specs import SPECS, find_spec, spec_by_key

GIB = 2**30


def test_keys_are_unique():
    keys = [spec.key for spec in SPECS]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.key)
def test_rates_are_sane(spec):
    assert 200 <= spec.memory_bandwidth_gbs <= 10_000
    assert spec.memory_gib > 0 and spec.sm_count > 0
    assert (7, 0) <= spec.compute_capability < (13, 0)
    assert 0 < spec.fp32_tflops < 200
    # Every GPU here has tensor cores, which beat its CUDA cores.
    assert spec.fp16_tflops >= spec.fp32_tflops
    # TF32 and BF16 tensor cores arrived with Ampere (compute capability 8.0).
    has_ampere_formats = spec.compute_capability >= (8, 0)
    assert (spec.tf32_tflops is not None) == has_ampere_formats
    assert (spec.bf16_tflops is not None) == has_ampere_formats
    if spec.tf32_tflops is not None:
        assert spec.fp32_tflops <= spec.tf32_tflops < spec.fp16_tflops
        assert spec.bf16_tflops == spec.fp16_tflops


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.key)
def test_every_spec_has_a_source_and_a_reported_name(spec):
    assert "http" in spec.source
    assert spec.device_names


@pytest.mark.parametrize("device_name, key", [
    ("Tesla T4", "t4"),
    ("Tesla V100-SXM2-16GB", "v100-sxm2-16gb"),
    ("Tesla V100-SXM2-32GB", "v100-sxm2-32gb"),
    ("Tesla V100-PCIE-32GB", "v100-pcie-32gb"),
    ("NVIDIA A100-SXM4-40GB", "a100-sxm-40gb"),
    ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
    ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"),
    ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA H100 NVL", "h100-nvl"),
    ("NVIDIA H200", "h200-sxm"),
    ("NVIDIA H200 NVL", "h200-nvl"),
    ("NVIDIA GH200 480GB", "gh200-96gb"),
    ("NVIDIA GH200 144G HBM3e", "gh200-144gb"),
    ("NVIDIA B200", "b200"),
    ("NVIDIA GeForce RTX 3090", "rtx-3090"),
    ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ("NVIDIA GeForce RTX 5090", "rtx-5090"),
    ("NVIDIA RTX A6000", "rtx-a6000"),
    ("NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada"),
    ("NVIDIA A10G", "a10g"),
    ("NVIDIA A10", "a10"),
    ("NVIDIA L4", "l4"),
    ("NVIDIA L40S", "l40s"),
])
def test_find_spec_maps_reported_names(device_name, key):
    assert find_spec(device_name).key == key


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.key)
def test_find_spec_with_typical_reported_memory(spec):
    # The driver reports a few percent less than the datasheet (ECC, reserved memory).
    reported = int(0.95 * spec.memory_gib * GIB)
    for device_name in spec.device_names:
        assert find_spec(device_name, reported) is spec


@pytest.mark.parametrize("device_name, memory_bytes, key", [
    # total_memory as reported on real machines
    ("NVIDIA A100-SXM4-40GB", 42_298_834_944, "a100-sxm-40gb"),
    ("NVIDIA GH200 144G HBM3e", 153_008_209_920, "gh200-144gb"),
])
def test_find_spec_with_real_reported_memory(device_name, memory_bytes, key):
    assert find_spec(device_name, memory_bytes).key == key


def test_reported_names_are_unambiguous_given_memory():
    seen = {}
    for spec in SPECS:
        for device_name in spec.device_names:
            other = seen.setdefault(device_name.lower(), spec)
            assert other is spec or other.memory_gib != spec.memory_gib, device_name


def test_find_spec_ignores_case_spacing_and_vendor_prefix():
    assert find_spec("nvidia  h200").key == "h200-sxm"
    assert find_spec("NVIDIA Tesla T4").key == "t4"
    assert find_spec("V100-SXM2-16GB").key == "v100-sxm2-16gb"


def test_find_spec_uses_memory_to_tell_variants_apart():
    # A 12 GB RTX 3080 reports the same name as the 10 GB one in the table.
    assert find_spec("NVIDIA GeForce RTX 3080", 10 * GIB).key == "rtx-3080-10gb"
    assert find_spec("NVIDIA GeForce RTX 3080", 12 * GIB) is None
    # A memory size that no A100 80GB has rules the name out.
    assert find_spec("NVIDIA A100-SXM4-80GB", 40 * GIB) is None


@pytest.mark.parametrize("device_name", [
    "NVIDIA GeForce RTX 4090 D",
    "NVIDIA GeForce RTX 4090 Laptop GPU",
    "NVIDIA H100",
    "NVIDIA A100",
    "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
    "NVIDIA GeForce GTX 1080 Ti",
    "AMD Instinct MI300X",
    "",
])
def test_find_spec_unknown_or_partial_names_give_none(device_name):
    assert find_spec(device_name) is None


def test_spec_by_key():
    assert spec_by_key("h200-sxm").memory_bandwidth_gbs == 4800
    assert spec_by_key("a100-pcie-40gb").memory_bandwidth_gbs == 1555
    assert spec_by_key("a100-pcie-80gb").memory_bandwidth_gbs == 1935
    assert spec_by_key("a100-sxm-80gb").memory_bandwidth_gbs == 2039


def test_spec_by_key_unknown_lists_known_keys():
    with pytest.raises(KeyError) as excinfo:
        spec_by_key("h900")
    message = str(excinfo.value)
    assert "h900" in message
    for spec in SPECS:
        assert spec.key in message
