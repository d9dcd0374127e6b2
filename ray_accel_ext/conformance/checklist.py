"""What a backend must ship, each item mapped to the suite tests that check it.

The repository's ``CHECKLIST.md`` explains each item for vendors; a test keeps the two in step
(same items, same test ids, every id an existing suite test). ``ray-accel conformance`` prints
this list with each item's pass/fail/skip.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Item", "ITEMS", "all_test_ids"]


@dataclass(frozen=True)
class Item:
    """One checklist item: a slug, a title, and the suite test ids (``Base...Tests::test_x``)."""

    slug: str
    title: str
    tests: tuple[str, ...]


ITEMS: tuple[Item, ...] = (
    Item("entry-point", "Registered through the ray_accel_ext.backends entry point", (
        "BaseRegistrationTests::test_backend_loads",
        "BaseRegistrationTests::test_entry_point_resolves",
        "BaseRegistrationTests::test_name_well_formed",
        "BaseRegistrationTests::test_resource_name_valid",
        "BaseRegistrationTests::test_api_version_supported",
        "BaseRegistrationTests::test_duplicate_registration_rejected",
    )),
    Item("capabilities", "Capabilities declared as data, and delivered", (
        "BaseRegistrationTests::test_capabilities_declared_as_data",
        "BaseDescriptionTests::test_declared_capabilities_are_shown",
        "BaseDescriptionTests::test_links_filled",
        "BaseDescriptionTests::test_nic_affinity_filled",
        "BaseDescriptionTests::test_numa_affinity_filled",
        "BaseDescriptionTests::test_fabric_domain_filled",
        "BaseDescriptionTests::test_provider_location_filled",
    )),
    Item("label-prefix", "Vendor labels only under a label prefix the vendor owns", (
        "BaseRegistrationTests::test_label_prefix_owned",
        "BaseDescriptionTests::test_consistent",
        "BaseAdapterTests::test_vendor_labels_under_own_prefix",
    )),
    Item("snapshots", "Recorded host snapshots, an empty host among them, with README and golden", (
        "BaseDescriptionTests::test_snapshots_given",
        "BaseDescriptionTests::test_snapshots_include_an_empty_host",
        "BaseDescriptionTests::test_snapshot_documented",
        "BaseDescriptionTests::test_matches_golden",
        "BaseDetectionTests::test_detect_matches_golden",
    )),
    Item("detection", "Detection: False on an empty host, never raises, pure, within budget, offline", (
        "BaseDetectionTests::test_detect_false_on_empty_host",
        "BaseDetectionTests::test_leaves_process_unchanged",
        "BaseDetectionTests::test_within_time_budget",
        "BaseDetectionTests::test_no_network_unless_declared",
        "BaseDetectionTests::test_no_state_carried_between_hosts",
    )),
    Item("description", "Descriptions consistent and round-trippable", (
        "BaseDescriptionTests::test_consistent",
        "BaseDescriptionTests::test_round_trip",
    )),
    Item("ray-spec", "What Ray receives: valid resources and selector-safe labels", (
        "BaseAdapterTests::test_resources_valid_for_ray",
        "BaseAdapterTests::test_labels_valid_for_ray_selectors",
        "BaseAdapterTests::test_matches_golden_ray_spec",
    )),
    Item("visibility", "Device visibility: pure, parses back, and reaches each task on a live node", (
        "BaseVisibilityTests::test_visible_devices_env_is_pure",
        "BaseVisibilityTests::test_visible_devices_round_trip",
        "BaseVisibilityTests::test_unset_means_all_devices",
        "BaseLiveRayTests::test_ray_isolates_devices_per_task",
    )),
    Item("live-ray", "A real Ray node started through the hook shows it", (
        "BaseLiveRayTests::test_ray_node_shows_promised_resources_and_labels",
    )),
    Item("xfails", "Known failures only in an xfails file with links; no overridden suite tests", (
        "BaseRegistrationTests::test_xfails_file_valid",
        "BaseRegistrationTests::test_no_suite_test_overridden",
    )),
    Item("hardware-data", "Hardware declared as data: PCI ids that match the recorded devices", (
        "BaseDescriptionTests::test_devices_match_declared_pci_ids",
    )),
    Item("ci", "A CI job that runs the suite, pinned to a ray_accel_ext release", ()),
)


def all_test_ids() -> set[str]:
    """Every suite test id the checklist names."""
    return {t for item in ITEMS for t in item.tests}
