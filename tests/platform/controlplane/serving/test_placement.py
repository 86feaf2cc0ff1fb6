from controlplane.serving.placement import NodeCapacity, Placement, Unschedulable, place


def node(node_id, name, free_indices, domain="d", load=0):
    return NodeCapacity(node_id, name, domain, tuple((node_id * 100 + i, i) for i in free_indices), load)


def test_picks_tightest_fit_and_lowest_indices():
    nodes = [node(1, "big", range(8)), node(2, "small", [1, 3, 5])]
    result = place(2, "nvidia", nodes)
    assert result == Placement(2, "small", (201, 203), (1, 3))


def test_ties_broken_by_load_then_name():
    nodes = [node(1, "b", [0], load=1), node(2, "a", [0], load=1), node(3, "c", [0], load=0)]
    assert place(1, "cpu", nodes).node_name == "c"
    assert place(1, "cpu", nodes[:2]).node_name == "a"


def test_unschedulable_says_why_in_words():
    result = place(8, "nvidia", [node(1, "n1", range(4)), node(2, "n2", range(2))])
    assert result == Unschedulable("needs 8 nvidia in one domain; largest free block is 4")


def test_no_nodes_at_all():
    assert place(1, "ascend", []) == Unschedulable("needs 1 ascend in one domain; largest free block is 0")


def test_rejects_non_positive_tp():
    assert isinstance(place(0, "nvidia", [node(1, "n", [0])]), Unschedulable)


def test_a_cordoned_node_is_never_chosen_and_the_reason_says_so():
    nodes = [node(1, "tight", [0]), node(2, "roomy", range(4))]
    cordoned = [NodeCapacity(1, "tight", "d", ((100, 0),), cordoned=True), nodes[1]]
    assert place(1, "nvidia", nodes).node_name == "tight"
    assert place(1, "nvidia", cordoned).node_name == "roomy"
    only_cordoned = [NodeCapacity(3, "big", "d", tuple((300 + i, i) for i in range(8)), cordoned=True)]
    assert place(2, "nvidia", only_cordoned) == Unschedulable(
        "needs 2 nvidia in one domain; largest free block is 0 (1 cordoned node would fit)"
    )


def test_a_node_whose_agent_cannot_drive_the_vendor_gets_nothing_and_the_reason_names_it():
    missing = "Ascend NPUs but no torch_npu runtime (install chassis[ascend] there, then restart its agent)"
    npu_node = NodeCapacity(1, "n1", "d", tuple((100 + i, i) for i in range(8)), missing_runtime=missing)
    assert place(1, "ascend", [npu_node]) == Unschedulable(
        "node n1 has 8 Ascend NPUs but no torch_npu runtime (install chassis[ascend] there, then "
        "restart its agent)"
    )
    twin = NodeCapacity(2, "n2", "d", ((200, 0),), missing_runtime=missing)
    assert place(1, "ascend", [npu_node, twin]).reason.endswith("(1 more node alike)")
    assert place(1, "ascend", [npu_node, node(3, "ok", [0])]).node_name == "ok"


def test_an_expert_parallel_replica_takes_its_world_size_on_one_node():
    nodes = [node(1, "one", [0]), node(2, "two", [3, 5])]
    assert place(2, "nvidia", nodes) == Placement(2, "two", (203, 205), (3, 5))


def test_a_domain_whose_nodes_fit_only_together_is_named_in_the_reason():
    rack = [node(1, "a", [0], domain="rack"), node(2, "b", [0, 1], domain="rack"), node(3, "c", [0])]
    assert place(3, "nvidia", rack) == Unschedulable(
        "needs 3 nvidia in one domain; largest free block is 2; domain rack has 3 free across 2 nodes, "
        "but a replica's ranks run on one node"
    )
    assert place(4, "nvidia", rack) == Unschedulable("needs 4 nvidia in one domain; largest free block is 2")
