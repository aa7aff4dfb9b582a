# The fixed driver `metaforge tool-server kicad` runs under the system Python with KiCad's
# pcbnew module, in a sandbox of its own, in a scratch directory holding one board (and its
# project file). It never takes code: `python3 driver.py COMMAND BOARD [OPTIONS_JSON]`.
# It writes result.json (and the files a command makes under out/); the server reads them back.
import json
import os
import sys

import pcbnew

MM = 1e6  # KiCad's internal unit is the nanometre.


def mm(value):
    return round(value / MM, 6)


def outline_size(board):
    """The board outline's size along its centre line (as a fab measures it), and whether
    Edge.Cuts closes; an open outline falls back to the edges' bounding box."""
    outline = pcbnew.SHAPE_POLY_SET()
    closed = board.GetBoardPolygonOutlines(outline)
    xs, ys = [], []
    for i in range(outline.OutlineCount()):
        ring = outline.Outline(i)
        for j in range(ring.PointCount()):
            point = ring.CPoint(j)
            xs.append(point.x)
            ys.append(point.y)
    if closed and xs:
        return max(xs) - min(xs), max(ys) - min(ys), True
    box = board.GetBoardEdgesBoundingBox()
    return box.GetWidth(), box.GetHeight(), False


def board_info(board, _options):
    width, height, closed = outline_size(board)
    copper = [pcbnew.LayerName(l) for l in board.GetEnabledLayers().CuStack()]
    tracks = [t for t in board.GetTracks() if t.GetClass() != "PCB_VIA"]
    vias = [t for t in board.GetTracks() if t.GetClass() == "PCB_VIA"]
    return {
        "copper_layers": copper,
        "layers": [pcbnew.LayerName(l) for l in board.GetEnabledLayers().Seq()],
        "width_mm": mm(width),
        "height_mm": mm(height),
        "outline_closed": closed,
        "thickness_mm": mm(board.GetDesignSettings().GetBoardThickness()),
        "footprints": len(board.GetFootprints()),
        "tracks": len(tracks),
        "vias": len(vias),
        "nets": max(board.GetNetCount() - 1, 0),
        "zones": board.GetAreaCount(),
    }


def drc(board, _options):
    ok = pcbnew.WriteDRCReport(board, "out/drc.rpt", pcbnew.EDA_UNITS_MILLIMETRES, True)
    return {"written": bool(ok)}


def gerbers(board, options):
    wanted = options.get("layers")
    enabled = list(board.GetEnabledLayers().Seq())
    by_name = {board.GetLayerName(l): l for l in enabled}
    by_name.update({pcbnew.LayerName(l): l for l in enabled})
    if wanted:
        missing = [name for name in wanted if name not in by_name]
        if missing:
            return {"error": "unknown_layers", "layers": missing, "enabled": sorted(by_name)}
        layers = [by_name[name] for name in wanted]
    else:
        standard = [pcbnew.F_Mask, pcbnew.B_Mask, pcbnew.F_SilkS, pcbnew.B_SilkS, pcbnew.Edge_Cuts]
        layers = list(board.GetEnabledLayers().CuStack()) + [l for l in standard if l in enabled]
    controller = pcbnew.PLOT_CONTROLLER(board)
    plot = controller.GetPlotOptions()
    plot.SetOutputDirectory("out")
    plot.SetFormat(pcbnew.PLOT_FORMAT_GERBER)
    plot.SetUseGerberX2format(True)
    plot.SetIncludeGerberNetlistInfo(True)
    plot.SetPlotFrameRef(False)
    files = []
    for layer in layers:
        suffix = pcbnew.LayerName(layer).replace(".", "_")
        controller.SetLayer(layer)
        controller.OpenPlotfile(suffix, pcbnew.PLOT_FORMAT_GERBER, pcbnew.LayerName(layer))
        controller.PlotLayer()
        files.append({"layer": pcbnew.LayerName(layer), "file": os.path.basename(controller.GetPlotFileName())})
    controller.ClosePlot()
    return {"files": files}


def drill(board, _options):
    writer = pcbnew.EXCELLON_WRITER(board)
    writer.SetOptions(False, False, board.GetDesignSettings().GetAuxOrigin(), False)
    writer.SetFormat(True)
    writer.CreateDrillandMapFilesSet("out", True, False)
    plated = unplated = 0
    for footprint in board.GetFootprints():
        for pad in footprint.Pads():
            if pad.GetDrillSize().x > 0:
                if pad.GetAttribute() == pcbnew.PAD_ATTRIB_NPTH:
                    unplated += 1
                else:
                    plated += 1
    vias = sum(1 for t in board.GetTracks() if t.GetClass() == "PCB_VIA")
    return {"plated_pad_holes": plated, "unplated_holes": unplated, "via_holes": vias,
            "files": sorted(f for f in os.listdir("out") if f.endswith(".drl"))}


def netlist(board, _options):
    nets = {}
    for footprint in board.GetFootprints():
        for pad in footprint.Pads():
            name = pad.GetNetname()
            if name:
                nets.setdefault(name, []).append(footprint.GetReference() + "." + pad.GetNumber())
    return {"nets": [{"name": name, "pads": sorted(pads)} for name, pads in sorted(nets.items())]}


def footprints(board, _options):
    return {"footprints": [
        {"reference": f.GetReference(), "value": f.GetValue(),
         "footprint": str(f.GetFPID().GetUniStringLibId())}
        for f in board.GetFootprints()
    ]}


COMMANDS = {"board_info": board_info, "drc": drc, "gerbers": gerbers, "drill": drill,
            "netlist": netlist, "footprints": footprints}


def main():
    command, board_file = sys.argv[1], sys.argv[2]
    options = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    os.makedirs("out", exist_ok=True)
    board = pcbnew.LoadBoard(board_file)
    result = COMMANDS[command](board, options)
    result["kicad_version"] = pcbnew.Version()
    with open("result.json", "w") as out:
        json.dump(result, out)


main()
