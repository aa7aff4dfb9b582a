# The fixed driver `metaforge tool-server cad` runs inside FreeCAD (`freecadcmd driver.py`), one
# process per modelling session, in a sandbox of its own whose scratch directory is the
# session's. It never takes code: each stdin line is one JSON request {"op", "args"} from the
# server's closed set of operations; each answer is one stdout line "@@metaforge " + JSON.
# FreeCAD's own printing goes to stdout too and is ignored by the server.
import json
import math
import os
import sys

import FreeCAD
import Part
import MeshPart
from FreeCAD import Base

PREFIX = "@@metaforge "
TOLERANCE = 1e-6


class Refused(Exception):
    """A request the caller can fix: its code, the argument it names, and why."""

    def __init__(self, code, field, message):
        super().__init__(message)
        self.code, self.field, self.message = code, field, message


objects = {}  # id -> ("part" | "sketch", shape, extra)
counters = {"part": 0, "sketch": 0}


def new_id(kind, shape, extra=None):
    counters[kind] += 1
    ident = "%s_%d" % (kind, counters[kind])
    objects[ident] = (kind, shape, extra or {})
    return ident


def get(kind, ident, field):
    entry = objects.get(ident)
    if entry is None or entry[0] != kind:
        known = sorted(k for k, v in objects.items() if v[0] == kind)
        raise Refused("unknown_" + kind, field,
                      "%s is no %s of this session (it has: %s)" % (ident, kind, ", ".join(known) or "none"))
    return entry


PLANES = {
    # plane: (2D -> 3D at offset, normal)
    "XY": (lambda u, v, o: Base.Vector(u, v, o), Base.Vector(0, 0, 1)),
    "XZ": (lambda u, v, o: Base.Vector(u, o, v), Base.Vector(0, 1, 0)),
    "YZ": (lambda u, v, o: Base.Vector(o, u, v), Base.Vector(1, 0, 0)),
}


def point2(value, field):
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(c, (int, float)) for c in value)):
        raise Refused("invalid_arguments", field, "a point is [u, v] in mm")
    return float(value[0]), float(value[1])


def loop_wire(loop, to3d, offset, field, closed):
    if "circle" in loop:
        circle = loop["circle"]
        cu, cv = point2(circle.get("centre"), field + ".circle.centre")
        radius = float(circle.get("radius_mm", 0))
        if radius <= 0:
            raise Refused("invalid_arguments", field + ".circle.radius_mm", "must be positive")
        centre = to3d(cu, cv, offset)
        normal = PLANES_NORMAL[id(to3d)]
        return Part.Wire([Part.makeCircle(radius, centre, normal)])
    start = point2(loop.get("start"), field + ".start")
    segments = loop.get("segments") or []
    if not segments:
        raise Refused("invalid_arguments", field + ".segments", "a profile needs at least one segment")
    edges = []
    here = start
    for i, segment in enumerate(segments):
        where = "%s.segments[%d]" % (field, i)
        if "line_to" in segment:
            to = point2(segment["line_to"], where + ".line_to")
            if math.dist(here, to) < TOLERANCE:
                raise Refused("invalid_arguments", where, "a line of zero length")
            edges.append(Part.LineSegment(to3d(*here, offset), to3d(*to, offset)).toShape())
        elif "arc_to" in segment:
            to = point2(segment["arc_to"], where + ".arc_to")
            through = point2(segment.get("through"), where + ".through")
            try:
                edges.append(Part.Arc(to3d(*here, offset), to3d(*through, offset), to3d(*to, offset)).toShape())
            except Exception as e:
                raise Refused("invalid_arguments", where, "no arc passes through these three points: %s" % e)
        else:
            raise Refused("invalid_arguments", where, "a segment is {\"line_to\": [u, v]} or {\"arc_to\": [u, v], \"through\": [u, v]}")
        here = to
    gap = math.dist(here, start)
    if closed and gap > TOLERANCE:
        raise Refused("profile_not_closed", field,
                      "the profile ends at [%g, %g], %g mm from its start [%g, %g]: end it where it starts, or set \"closed\": false for a sweep path"
                      % (here[0], here[1], gap, start[0], start[1]))
    return Part.Wire(edges)


PLANES_NORMAL = {}
for _name, (_to3d, _normal) in PLANES.items():
    PLANES_NORMAL[id(_to3d)] = _normal


def op_create_sketch(args):
    plane = args.get("plane", "XY")
    if plane not in PLANES:
        raise Refused("invalid_arguments", "plane", "one of XY, XZ, YZ")
    to3d, normal = PLANES[plane]
    offset = float(args.get("offset_mm", 0.0))
    closed = bool(args.get("closed", True))
    loops = args.get("loops") or []
    if not loops:
        raise Refused("invalid_arguments", "loops", "a sketch needs at least one loop")
    if not closed and len(loops) != 1:
        raise Refused("invalid_arguments", "loops", "an open sketch (a sweep path) has exactly one loop")
    wires = [loop_wire(loop, to3d, offset, "loops[%d]" % i, closed) for i, loop in enumerate(loops)]
    extra = {"plane": plane, "normal": [normal.x, normal.y, normal.z], "closed": closed}
    if closed:
        face = Part.Face(wires[0])
        for inner in wires[1:]:
            face = face.cut(Part.Face(inner))
        if not face.isValid() or face.Area <= TOLERANCE:
            raise Refused("invalid_profile", "loops", "the loops do not bound a face (do they cross?)")
        shape = face
        extra["area_mm2"] = face.Area
    else:
        shape = wires[0]
        extra["length_mm"] = shape.Length
    ident = new_id("sketch", shape, extra)
    return dict({"sketch": ident}, **{k: v for k, v in extra.items() if k != "normal"})


def closed_sketch(ident, field):
    _, shape, extra = get("sketch", ident, field)
    if not extra["closed"]:
        raise Refused("invalid_arguments", field, "%s is an open path; this needs a closed profile" % ident)
    return shape, extra


def direction(extra, args):
    normal = Base.Vector(*extra["normal"])
    return normal * (-1 if args.get("reversed") else 1)


def positive(args, field):
    value = args.get(field)
    if not isinstance(value, (int, float)) or value <= 0:
        raise Refused("invalid_arguments", field, "must be a positive number")
    return float(value)


def solid_result(shape):
    if not shape.isValid() or shape.Volume <= TOLERANCE:
        raise Refused("invalid_geometry", "", "the operation gave no valid solid")
    ident = new_id("part", shape)
    return {"part": ident, "volume_mm3": shape.Volume, "solids": len(shape.Solids)}


def op_pad_sketch(args):
    face, extra = closed_sketch(args.get("sketch"), "sketch")
    length = positive(args, "length_mm")
    return solid_result(face.extrude(direction(extra, args) * length))


def op_pocket_sketch(args):
    _, part, _ = get("part", args.get("part"), "part")
    face, extra = closed_sketch(args.get("sketch"), "sketch")
    if args.get("through_all"):
        diagonal = part.BoundBox.DiagonalLength + 1.0
        tool = face.extrude(direction(extra, args) * diagonal)
    else:
        tool = face.extrude(direction(extra, args) * positive(args, "depth_mm"))
    result = part.cut(tool)
    if abs(result.Volume - part.Volume) < TOLERANCE:
        raise Refused("no_effect", "sketch", "the pocket does not meet the part: check the sketch's plane, offset and \"reversed\"")
    return solid_result(result.removeSplitter())


def vector3(value, field):
    if not (isinstance(value, list) and len(value) == 3 and all(isinstance(c, (int, float)) for c in value)):
        raise Refused("invalid_arguments", field, "a vector is [x, y, z]")
    return Base.Vector(*[float(c) for c in value])


def op_revolve_sketch(args):
    face, _ = closed_sketch(args.get("sketch"), "sketch")
    point = vector3(args.get("axis_point_mm", [0, 0, 0]), "axis_point_mm")
    axis = vector3(args.get("axis_direction"), "axis_direction")
    if axis.Length < TOLERANCE:
        raise Refused("invalid_arguments", "axis_direction", "must not be zero")
    angle = float(args.get("angle_deg", 360.0))
    if not 0 < angle <= 360:
        raise Refused("invalid_arguments", "angle_deg", "from above 0 to 360")
    return solid_result(face.revolve(point, axis, angle))


def op_loft_sketches(args):
    idents = args.get("sketches") or []
    if len(idents) < 2:
        raise Refused("invalid_arguments", "sketches", "a loft needs at least two profiles")
    wires = [closed_sketch(ident, "sketches[%d]" % i)[0].OuterWire for i, ident in enumerate(idents)]
    return solid_result(Part.makeLoft(wires, True, bool(args.get("ruled", False))))


def op_sweep_sketch(args):
    face, _ = closed_sketch(args.get("sketch"), "sketch")
    _, path, path_extra = get("sketch", args.get("path"), "path")
    if path_extra["closed"]:
        path = path.OuterWire
    shell = Part.BRepOffsetAPI.MakePipeShell(path)
    shell.setFrenetMode(bool(args.get("frenet", True)))
    shell.add(face.OuterWire)
    shell.build()
    shell.makeSolid()
    return solid_result(shell.shape())


def edges_selected(part, selector, field):
    if selector == "all" or selector is None:
        return part.Edges
    if isinstance(selector, dict) and "parallel_to" in selector:
        axis = {"x": Base.Vector(1, 0, 0), "y": Base.Vector(0, 1, 0), "z": Base.Vector(0, 0, 1)}.get(selector["parallel_to"])
        if axis is None:
            raise Refused("invalid_arguments", field + ".parallel_to", "x, y or z")
        chosen = []
        for edge in part.Edges:
            if isinstance(edge.Curve, Part.Line):
                d = edge.Vertexes[-1].Point - edge.Vertexes[0].Point
                if d.Length > TOLERANCE and abs(abs(d.normalize().dot(axis)) - 1) < 1e-9:
                    chosen.append(edge)
        return chosen
    if isinstance(selector, dict) and "indices" in selector:
        indices = selector["indices"]
        if not all(isinstance(i, int) and 1 <= i <= len(part.Edges) for i in indices):
            raise Refused("invalid_arguments", field + ".indices", "edge numbers from 1 to %d" % len(part.Edges))
        return [part.Edges[i - 1] for i in indices]
    raise Refused("invalid_arguments", field, "\"all\", {\"parallel_to\": \"x\"|\"y\"|\"z\"} or {\"indices\": [1, 2]}")


def edge_operation(args, size_field, what, make):
    _, part, _ = get("part", args.get("part"), "part")
    edges = edges_selected(part, args.get("edges", "all"), "edges")
    if not edges:
        raise Refused("no_edges", "edges", "the selector picks no edge of this part")
    try:
        return solid_result(make(part, positive(args, size_field), edges))
    except Part.OCCError as e:
        raise Refused("invalid_geometry", size_field, "FreeCAD cannot %s these edges with this size: %s" % (what, e))


def op_fillet_edges(args):
    return edge_operation(args, "radius_mm", "fillet", lambda part, r, edges: part.makeFillet(r, edges))


def op_chamfer_edges(args):
    return edge_operation(args, "size_mm", "chamfer", lambda part, d, edges: part.makeChamfer(d, edges))


def op_boolean(args):
    _, base, _ = get("part", args.get("base"), "base")
    _, tool, _ = get("part", args.get("tool"), "tool")
    operation = args.get("operation")
    if operation == "union":
        result = base.fuse(tool)
    elif operation == "cut":
        result = base.cut(tool)
    elif operation == "intersection":
        result = base.common(tool)
    else:
        raise Refused("invalid_arguments", "operation", "union, cut or intersection")
    return solid_result(result.removeSplitter())


def op_place(args):
    _, part, _ = get("part", args.get("part"), "part")
    moved = part.copy()
    rotate = args.get("rotate")
    if rotate is not None:
        moved.rotate(vector3(rotate.get("point_mm", [0, 0, 0]), "rotate.point_mm"),
                     vector3(rotate.get("axis"), "rotate.axis"), float(rotate.get("angle_deg", 0)))
    moved.translate(vector3(args.get("translate_mm", [0, 0, 0]), "translate_mm"))
    return solid_result(moved)


def op_import_step(args):
    name = args["file"]
    shape = Part.Shape()
    try:
        shape.read(os.path.join("imports", name))
    except Exception as e:
        raise Refused("unreadable_step", "path", "FreeCAD cannot read it as STEP: %s" % e)
    if not shape.Solids:
        raise Refused("no_solid", "path", "the STEP file holds no solid")
    return solid_result(shape)


def op_export_model(args):
    _, part, _ = get("part", args.get("part"), "part")
    name, fmt = args["name"], args["format"]
    os.makedirs("exports", exist_ok=True)
    path = os.path.join("exports", name)
    if fmt == "step":
        part.exportStep(path)
        return {"file": name, "format": "step"}
    tolerance = positive(args, "tolerance_mm")
    mesh = MeshPart.meshFromShape(Shape=part, LinearDeflection=tolerance, AngularDeflection=0.5)
    mesh.write(path, "AST")
    return {"file": name, "format": "stl", "facets": mesh.CountFacets, "tolerance_mm": tolerance}


def op_measure(args):
    _, part, _ = get("part", args.get("part"), "part")
    box = part.BoundBox
    volume = part.Volume
    moment = Base.Vector(0, 0, 0)
    for solid in part.Solids:
        moment += solid.CenterOfMass * solid.Volume
    centre = moment * (1.0 / volume) if volume > 0 else Base.Vector(0, 0, 0)
    result = {
        "volume_mm3": volume,
        "area_mm2": part.Area,
        "bounding_box_mm": {"min": [box.XMin, box.YMin, box.ZMin], "max": [box.XMax, box.YMax, box.ZMax],
                            "size": [box.XLength, box.YLength, box.ZLength]},
        "centre_of_mass_mm": [centre.x, centre.y, centre.z],
        "solids": len(part.Solids), "faces": len(part.Faces), "edges": len(part.Edges),
    }
    density = args.get("density_kg_m3")
    if density is not None:
        if not isinstance(density, (int, float)) or density <= 0:
            raise Refused("invalid_arguments", "density_kg_m3", "must be positive")
        result["density_kg_m3"] = density
        result["mass_kg"] = volume * 1e-9 * density
    return result


def op_list_objects(_args):
    return {"objects": [{"id": k, "kind": v[0]} for k, v in sorted(objects.items())]}


OPS = {name[3:]: f for name, f in globals().items() if name.startswith("op_")}


def answer(payload):
    sys.stdout.write("\n" + PREFIX + json.dumps(payload) + "\n")
    sys.stdout.flush()


answer({"ready": True, "freecad_version": ".".join(FreeCAD.Version()[:3])})
for line in sys.stdin:
    try:
        request = json.loads(line)
        op = OPS.get(request.get("op"))
        if op is None:
            raise Refused("unknown_operation", "op", "not an operation of this driver")
        answer({"ok": True, "result": op(request.get("args") or {})})
    except Refused as e:
        answer({"ok": False, "error": e.code, "field": e.field, "message": e.message})
    except Exception as e:
        answer({"ok": False, "error": "freecad_failed", "field": "", "message": "%s: %s" % (type(e).__name__, e)})
